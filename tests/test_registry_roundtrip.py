"""From the built image to the DaemonSet, as docs/kubernetes.md tells users: the image built by
scripts/build-image.sh is tagged for a registry (Debian's docker-registry on a loopback port),
pushed, untagged, pulled back by the digest the push reported into a store of
its own, and run with the args, env, mounts and security settings of the DaemonSet rendered
with the kustomization's `images:` override (`kustomize edit set image` writes the same).

Skips where podman cannot build or run the image here, or the registry binary is missing or
cannot serve.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.support.daemon import free_port, http_get
from tests.support.gpus import GPU_B as GPU
from tests.support.image_build import NO_DEFAULT_ULIMITS, runc_engine
from tests.support.paths import REPO_ROOT
from tests.support.waiting import poll

MANIFESTS = REPO_ROOT / "manifests"
SHIPPED = "ghcr.io/gpustats/gpustats"
REGISTRY_BINARIES = ("docker-registry", "registry")
NODE = "gpu-node-7"


def _answers_until(port: int, paths, done, timeout: float = 60.0,
                   running=lambda: True) -> dict:
    """The daemon's answers on ``paths`` once ``done(answers)`` (or the last ones got, after
    ``timeout`` or once it stops ``running``)."""
    answers: dict = {}

    def met() -> bool:
        if not running():
            return True
        try:
            got = {path: http_get(f"http://127.0.0.1:{port}{path}") for path in paths}
        except OSError:
            return False
        answers.clear()
        answers.update(got)
        return bool(done(got))

    poll(met, timeout=timeout, interval=0.5)
    return answers

def _podman(env, *args, timeout=300, check=True):
    result = subprocess.run(["podman", *args], env=env, capture_output=True, text=True,
                            timeout=timeout)
    if check:
        assert result.returncode == 0, (args, result.stderr[-2000:])
    return result


def _registry_binary() -> str:
    for name in REGISTRY_BINARIES:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip("no registry binary (Debian's package docker-registry)")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """A docker-registry on a free loopback port, its storage in a temporary directory."""
    binary = _registry_binary()
    tmp = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = tmp / "config.yml"
    config.write_text(yaml.safe_dump({
        "version": 0.1, "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(tmp / "data")}},
        "http": {"addr": f"127.0.0.1:{port}"}}))
    with open(tmp / "registry.log", "w") as log:
        proc = subprocess.Popen([binary, "serve", str(config)], stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        def serving() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (OSError, urllib.error.URLError):
                pass
            return proc.poll() is not None          # ends the wait: it will not serve

        if not poll(serving, timeout=30, interval=0.2) or proc.poll() is not None:
            pytest.skip("the registry did not serve here: "
                        + (tmp / "registry.log").read_text()[-300:])
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def pushed(built_image, registry):
    """Tag → push (recording the digest) → remove the local tag: (tag reference, digest)."""
    env, tmp = built_image.env, built_image.tmp
    reference = f"{registry}/gpustats/gpustats:0.1.0"
    _podman(env, "tag", built_image.image_id, reference)
    try:
        digest_file = tmp / "digest"
        started = time.monotonic()
        _podman(env, "push", "--quiet", "--tls-verify=false", f"--digestfile={digest_file}",
                reference)
        print(f"push {time.monotonic() - started:.1f} s")
    finally:
        _podman(env, "untag", reference, reference, check=False)
    assert _podman(env, "image", "exists", reference, check=False).returncode == 1
    digest = digest_file.read_text().strip()
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", digest), digest
    return reference, digest


def _kubectl_kustomize() -> str | None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    version = subprocess.run([kubectl, "version", "--client"], capture_output=True, text=True)
    return kubectl if re.search(r"Kustomize Version: v[4-9]", version.stdout) else None


def _overlay(path: Path, new_name: str, digest: str) -> Path:
    """An overlay of manifests/ whose DaemonSet pulls ``new_name@digest``: written by
    `kustomize edit set image` where kustomize is installed, else as the `images:` field."""
    path.mkdir()
    base = os.path.relpath(MANIFESTS, path)       # kustomize refuses absolute directories
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "resources": [base]}
    (path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    kustomize = shutil.which("kustomize")
    if kustomize:
        subprocess.run([kustomize, "edit", "set", "image", f"{SHIPPED}={new_name}@{digest}"],
                       cwd=path, check=True, capture_output=True, timeout=60)
    else:
        kustomization["images"] = [{"name": SHIPPED, "newName": new_name, "digest": digest}]
        (path / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    return path


def _render(kubectl: str, path: Path) -> dict[tuple[str, str], dict]:
    done = subprocess.run([kubectl, "kustomize", "--load-restrictor", "LoadRestrictionsNone",
                           str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(done.stdout)}


@pytest.fixture(scope="module")
def daemonset(pushed, tmp_path_factory):
    """The DaemonSet pointed at the pushed image: rendered by kubectl's kustomize where it is
    installed, else manifests/daemonset.yaml with the image replaced the way `images:` does."""
    reference, digest = pushed
    new_name = reference.rsplit(":", 1)[0]
    kubectl = _kubectl_kustomize()
    if kubectl is None:
        doc = yaml.safe_load((MANIFESTS / "daemonset.yaml").read_text())
        for container in doc["spec"]["template"]["spec"]["containers"]:
            if container["image"].rsplit(":", 1)[0] == SHIPPED:
                container["image"] = f"{new_name}@{digest}"
        return doc
    overlay = _overlay(tmp_path_factory.mktemp("kustomize") / "overlay", new_name, digest)
    return _render(kubectl, overlay)[("DaemonSet", "gpustats")]


def test_kustomize_image_override_points_the_daemonset_at_the_pushed_image(pushed, daemonset,
                                                                          tmp_path):
    kubectl = _kubectl_kustomize()
    if kubectl is None:
        pytest.skip("kubectl with kustomize v4+ not installed")
    reference, digest = pushed
    new_name = reference.rsplit(":", 1)[0]
    containers = {c["name"]: c for c in daemonset["spec"]["template"]["spec"]["containers"]}
    assert containers["gpustats"]["image"] == f"{new_name}@{digest}"
    # Only gpustats' image moves: the sidecar and every other object render as shipped.
    shipped = _render(kubectl, MANIFESTS)
    assert containers["kube-rbac-proxy"]["image"] == next(
        c["image"] for c in shipped[("DaemonSet", "gpustats")]["spec"]["template"]["spec"]
        ["containers"] if c["name"] == "kube-rbac-proxy")
    patched = _render(kubectl, _overlay(tmp_path / "overlay", new_name, digest))
    assert {k: v for k, v in shipped.items() if k[0] != "DaemonSet"} == \
        {k: v for k, v in patched.items() if k[0] != "DaemonSet"}


def _run_args(pod: dict, container: dict, host: Path, port: int) -> list[str]:
    """`podman run` options and the command line for ``container`` as the kubelet would run it
    on this host: hostPath directories the kubelet would create are made under ``host``, the
    state directory stays writable there, emptyDirs are tmpfs, and the daemon listens on
    ``port`` (the pod's loopback is the host's here: --network=host)."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    user = pod["securityContext"]
    security = container["securityContext"]
    options = [f"--user={user['runAsUser']}:{user['runAsGroup']}", "--network=host"]
    if security.get("readOnlyRootFilesystem"):
        options.append("--read-only")
    if security.get("allowPrivilegeEscalation") is False:
        options.append("--security-opt=no-new-privileges")
    options += [f"--cap-drop={cap}" for cap in security["capabilities"]["drop"]]
    for var in container["env"]:
        value = var.get("value", NODE if "fieldRef" in var.get("valueFrom", {}) else None)
        assert value is not None, var
        options.append(f"--env={var['name']}={value}")
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        target = mount["mountPath"]
        if "emptyDir" in volume:
            options.append(f"--tmpfs={target}:rw,size=16m")
            continue
        hostpath = volume["hostPath"]
        if hostpath.get("type") == "DirectoryOrCreate":
            source = host / hostpath["path"].strip("/")
            source.mkdir(parents=True, exist_ok=True)
        else:
            source = Path(hostpath["path"])
        options.append(f"--volume={source}:{target}" + (":ro" if mount.get("readOnly") else ""))
    args = [re.sub(r"^--listen=127\.0\.0\.1:\d+$", f"--listen=127.0.0.1:{port}", a)
            for a in container["args"]]
    assert f"--listen=127.0.0.1:{port}" in args
    return options + [container["image"], *args]


def test_pulled_image_runs_as_the_daemonset_runs_it(built_image, daemonset, tmp_path):
    pod = daemonset["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "gpustats")
    reference = container["image"]
    # A store of its own: everything the container runs from comes from the registry.
    store, env = tmp_path / "store", built_image.env
    runroot = tempfile.mkdtemp(prefix="gpustats-run-")     # podman wants it under 50 characters
    own = ["--root", str(store), "--runroot", runroot]
    try:
        started = time.monotonic()
        _podman(env, *own, "pull", "--quiet", "--tls-verify=false", reference)
        print(f"pull {time.monotonic() - started:.1f} s")
        pulled_id = _podman(env, *own, "image", "inspect", "--format", "{{.Id}}",
                            reference).stdout.strip()
        assert pulled_id == built_image.image_id
        scenario = tmp_path / "scenario.yaml"
        scenario.write_text(f"devices:\n  - {{uuid: {GPU}, minor: 0, power_watts: 250}}\n")
        port = free_port()
        name = f"gpustats-registry-{port}"
        run = _run_args(pod, container, tmp_path / "host", port)
        _podman(env, *own, "run", "-d", f"--name={name}",
                f"--volume={scenario}:/etc/gpustats/scenario.yaml:ro,Z", *run,
                "--simulate=/etc/gpustats/scenario.yaml", "--housekeeping-interval=0.5")
        probes = {container[p]["httpGet"]["path"] for p in ("livenessProbe", "readinessProbe")}
        assert probes == {"/healthz", "/readyz"}
        answers = _answers_until(
            port, (*sorted(probes), "/stats/summary"),
            lambda got: all(status == 200 for status, _ in got.values())
            and got["/stats/summary"][1]["node"].get("accelerators"))
        logs = _podman(env, *own, "logs", name, check=False)
        assert answers and all(s == 200 for s, _ in answers.values()), \
            (answers, logs.stdout + logs.stderr)
        assert answers["/readyz"][1]["status"] == "ready"
        node = answers["/stats/summary"][1]["node"]
        assert node["nodeName"] == NODE
        assert [a["id"] for a in node["accelerators"]] == [GPU]
    finally:
        _podman(env, *own, "rm", "--force", "--all", check=False)
        _podman(env, *own, "rmi", "--force", "--all", check=False)
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(runroot, ignore_errors=True)


def _kubernetes_sh_blocks() -> list[str]:
    """The shell blocks of the Kubernetes guide (docs/kubernetes.md), as a user pastes them."""
    text = (REPO_ROOT / "docs" / "kubernetes.md").read_text()
    return re.findall(r"```sh\n(.*?)\n```", text, re.S)


def test_readme_podman_run_works_with_its_rlimit_setting(built_image, tmp_path):
    """The Kubernetes guide's `podman run`, after its containers.conf lines, as a user pastes them
    (only the image reference and the port differ; on the hybrid cgroup layout the file also names
    runc, the host setting the guide says to carry over): it serves here, where podman's
    default rlimits stop runc."""
    blocks = _kubernetes_sh_blocks()
    setting = next(b for b in blocks if "default_ulimits = []" in b)
    command = next(b for b in blocks if b.startswith("podman run "))
    assert NO_DEFAULT_ULIMITS.replace("\n", "\\n") in setting
    port = free_port()
    name = f"gpustats-readme-{port}"
    for old, new in (("localhost/gpustats:0.1.0", built_image.image_id),
                     ("--listen 127.0.0.1:9477", f"--listen 127.0.0.1:{port}"),
                     ("podman run ", f"exec podman run --name={name} ")):
        assert command.count(old) == 1, old
        command = command.replace(old, new)
    shutil.copytree(REPO_ROOT / "examples", tmp_path / "examples")
    env = {k: v for k, v in built_image.env.items() if k != "CONTAINERS_CONF"}
    carried = f"printf '{runc_engine()}' >> \"$CONTAINERS_CONF\"\n" if runc_engine() else ""
    with open(tmp_path / "run.log", "w") as log:
        proc = subprocess.Popen(["bash", "-euc", f"{setting}\n{carried}{command}"], cwd=tmp_path,
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        answers = _answers_until(
            port, ("/readyz", "/stats/summary"),
            lambda got: got["/readyz"][0] == 200
            and len(got["/stats/summary"][1]["node"].get("accelerators", [])) == 2,
            running=lambda: proc.poll() is None)
        assert answers and answers["/readyz"][0] == 200, \
            (answers, (tmp_path / "run.log").read_text()[-2000:])
        assert len(answers["/stats/summary"][1]["node"]["accelerators"]) == 2
    finally:
        _podman(built_image.env, "rm", "--force", name, check=False)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_readme_points_the_kustomization_at_the_pushed_image():
    block = next(b for b in _kubernetes_sh_blocks() if "podman push" in b)
    assert "kustomize edit set image ghcr.io/gpustats/gpustats=" in block
    assert f"image: {SHIPPED}:" in (MANIFESTS / "daemonset.yaml").read_text()
