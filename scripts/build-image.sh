#!/usr/bin/env bash
# Builds the gpustats container image with podman (or buildah) without network in the build.
#
#   bash scripts/build-image.sh [--base IMAGE] TAG
#
# 1. Wheels: gpustats from this checkout, and its dependencies for the base image's Python
#    (binary wheels for its version and architecture), fetched on the host with pip, so the
#    build works behind proxies and air-gapped once they are here.
# 2. Base: --base IMAGE; else the official Python slim image when a registry answers; else a
#    base made here from Debian packages (mmdebstrap: minbase + python3), imported as
#    localhost/gpustats-base:<suite> and reused by later builds.
# 3. Build the Containerfile with --network=none, label it with a hash of its inputs (an
#    image already built from the same inputs is kept), and print its size.
#
# Environment: PYTHON (host interpreter for pip; default .venv/bin/python, else python3),
# GPUSTATS_DEBIAN_SUITE (default bookworm), GPUSTATS_DEBIAN_MIRROR (default: mmdebstrap's).
# Rootful podman on hosts whose runc cannot set podman's default rlimits needs
# `default_ulimits = []` in the containers.conf that CONTAINERS_CONF names.
set -euo pipefail

usage() { echo "usage: $0 [--base IMAGE] TAG" >&2; exit 2; }
base=""
while [ $# -gt 0 ]; do
    case "$1" in
        --base) [ $# -ge 2 ] || usage; base="$2"; shift 2 ;;
        --base=*) base="${1#--base=}"; shift ;;
        -h|--help) usage ;;
        -*) usage ;;
        *) break ;;
    esac
done
[ $# -eq 1 ] || usage
tag="$1"

cd "$(dirname "$0")/.."
repo="$PWD"
if command -v podman >/dev/null 2>&1; then
    engine=podman
elif command -v buildah >/dev/null 2>&1; then
    engine=buildah
else
    echo "build-image: neither podman nor buildah is installed" >&2; exit 1
fi
python="${PYTHON:-}"
if [ -z "$python" ]; then
    if [ -x .venv/bin/python ]; then python=.venv/bin/python; else python=python3; fi
fi
suite="${GPUSTATS_DEBIAN_SUITE:-bookworm}"
official="docker.io/library/python:3.11-slim"
started=$(date +%s)
workdir=$(mktemp -d)
trap 'rm -rf "$workdir"' EXIT

# Hosts without a containers.conf of their own (only the distribution's defaults) get one for
# this build: those defaults plus no default rlimits (runc cannot raise them inside some
# sandboxes) and runc where the cgroup layout is hybrid (crun refuses it). A host's own
# containers.conf, or CONTAINERS_CONF, is used as it is.
if [ -z "${CONTAINERS_CONF:-}" ] && [ ! -e /etc/containers/containers.conf ] \
        && [ ! -e "${XDG_CONFIG_HOME:-$HOME/.config}/containers/containers.conf" ]; then
    runtime=""
    if [ -d /sys/fs/cgroup/unified ] && command -v runc >/dev/null 2>&1; then
        runtime='runtime = "runc"'
    fi
    { cat /usr/share/containers/containers.conf 2>/dev/null || printf '[containers]\n[engine]\n'; } \
        | sed -e 's/^\[containers\]$/[containers]\ndefault_ulimits = []/' \
              -e "s/^\[engine\]\$/[engine]\n$runtime/" > "$workdir/containers.conf"
    export CONTAINERS_CONF="$workdir/containers.conf"
fi

exists() {
    if [ "$engine" = podman ]; then podman image exists "$1"; else buildah inspect --type image "$1" >/dev/null 2>&1; fi
}
run_in() {   # run_in IMAGE CMD... (no network)
    if [ "$engine" = podman ]; then
        podman run --rm --network=none --entrypoint "$2" "$1" "${@:3}"
    else
        local c; c=$(buildah from --quiet "$1")
        buildah run --network=none "$c" -- "${@:2}"; local rc=$?
        buildah rm "$c" >/dev/null
        return $rc
    fi
}

# ---------------------------------------------------------------- base image
if [ -z "$base" ]; then
    if exists "$official" || timeout 60 "$engine" pull -q "$official" >/dev/null 2>&1; then
        base="$official"
    else
        base="localhost/gpustats-base:$suite"
        if ! exists "$base"; then
            command -v mmdebstrap >/dev/null 2>&1 || {
                echo "build-image: no registry answered and mmdebstrap is not installed" >&2; exit 1; }
            echo "build-image: no registry answered; making $base from Debian $suite packages" >&2
            tarball="$workdir/base.tar"
            # minbase + python3; documentation, manuals and locales left out.
            mmdebstrap --quiet --variant=minbase --include=python3,ca-certificates \
                --dpkgopt='path-exclude=/usr/share/doc/*' \
                --dpkgopt='path-include=/usr/share/doc/*/copyright' \
                --dpkgopt='path-exclude=/usr/share/man/*' \
                --dpkgopt='path-exclude=/usr/share/locale/*' \
                --dpkgopt='path-exclude=/usr/share/info/*' \
                "$suite" "$tarball" ${GPUSTATS_DEBIAN_MIRROR:+"$GPUSTATS_DEBIAN_MIRROR"}
            if [ "$engine" = podman ]; then
                podman import --quiet --change 'CMD ["/bin/bash"]' "$tarball" "$base" >/dev/null
            else
                c=$(buildah from --quiet scratch)
                buildah add --quiet "$c" "$tarball" / >/dev/null
                buildah commit --quiet "$c" "$base" >/dev/null
                buildah rm "$c" >/dev/null
            fi
            rm -f "$tarball"
        fi
    fi
fi
echo "build-image: base $base" >&2

# ---------------------------------------------------------------- wheels
read -r pyver platform < <(run_in "$base" python3 -c \
    'import sys, sysconfig; print("%d.%d" % sys.version_info[:2], sysconfig.get_platform().split("-", 1)[1].replace("-", "_"))')
context="$workdir/context"
mkdir -p "$context/wheels"
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$context/wheels" "$repo"
# Binary wheels for the base's interpreter, whatever the host's.
"$python" -m pip download --quiet --only-binary=:all: --dest "$context/wheels" \
    --python-version "$pyver" --implementation cp \
    --platform "manylinux2014_$platform" --platform "manylinux_2_17_$platform" \
    --platform "manylinux_2_28_$platform" --platform "manylinux_2_5_$platform" \
    --platform "manylinux1_$platform" --platform "linux_$platform" \
    "$context"/wheels/gpustats-*.whl pip
cp Containerfile "$context/Containerfile"

# ---------------------------------------------------------------- build
# The inputs' identity: the Containerfile, the base, and each wheel's member names and CRCs
# (a wheel rebuilt from the same source differs only in its zip timestamps).
inputs=$("$python" - "$base" "$context/Containerfile" "$context"/wheels/*.whl <<'PY'
import hashlib, sys, zipfile
h = hashlib.sha256(sys.argv[1].encode())
h.update(open(sys.argv[2], "rb").read())
for wheel in sorted(sys.argv[3:], key=lambda p: p.rsplit("/", 1)[-1]):
    h.update(wheel.rsplit("/", 1)[-1].encode())
    for info in sorted(zipfile.ZipFile(wheel).infolist(), key=lambda i: i.filename):
        h.update(f"{info.filename} {info.CRC}".encode())
print(h.hexdigest()[:16])
PY
)
if exists "$tag" && [ "$("$engine" inspect --format '{{ index .Labels "io.gpustats.build-inputs" }}' "$tag" 2>/dev/null)" = "$inputs" ]; then
    echo "build-image: $tag is already built from these inputs ($inputs)" >&2
else
    if [ "$engine" = podman ]; then
        podman build --quiet --network=none --pull=never --build-arg "BASE=$base" \
            --label "io.gpustats.build-inputs=$inputs" -t "$tag" -f "$context/Containerfile" "$context" >/dev/null
    else
        buildah build --quiet --network=none --pull-never --build-arg "BASE=$base" \
            --label "io.gpustats.build-inputs=$inputs" -t "$tag" -f "$context/Containerfile" "$context" >/dev/null
    fi
fi
size=$("$engine" inspect --format '{{ .Size }}' "$tag" 2>/dev/null || echo "")
echo "build-image: $tag ready in $(( $(date +%s) - started )) s"
if [ -n "$size" ]; then
    echo "build-image: image size $(( size / 1000000 )) MB ($size bytes)"
fi
