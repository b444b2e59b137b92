"""Tiny container images built from Debian's busybox-static, for tests that drive a real
runtime: a root filesystem tarball (``podman import``) and an OCI image-layout archive
(``ctr images import``)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import platform
import shutil
import tarfile
from pathlib import Path

BUSYBOX_CANDIDATES = ("/bin/busybox", "/usr/bin/busybox")
_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def busybox() -> str | None:
    """The static busybox binary, or None (the tests that need it skip)."""
    for path in BUSYBOX_CANDIDATES:
        p = Path(path)
        if p.is_file() and _is_static(p):
            return path
    found = shutil.which("busybox")
    return found if found and _is_static(Path(found)) else None


def _is_static(path: Path) -> bool:
    # An ELF without a PT_INTERP program header needs no loader: it runs in an empty root.
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:          # 64-bit ELF only
        return False
    phoff = int.from_bytes(data[0x20:0x28], "little")
    phentsize = int.from_bytes(data[0x36:0x38], "little")
    phnum = int.from_bytes(data[0x38:0x3a], "little")
    for i in range(phnum):
        start = phoff + i * phentsize
        if int.from_bytes(data[start:start + 4], "little") == 3:    # PT_INTERP
            return False
    return True


def rootfs_tar(binary: str) -> bytes:
    """An uncompressed tar holding /bin/busybox and /bin/sh, /bin/sleep links, /tmp."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("bin", "tmp", "etc", "proc", "sys", "dev"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        data = Path(binary).read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in ("sh", "sleep", "true", "cat"):
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(link)
    return buf.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return f"sha256:{digest}", len(data)


def oci_archive(binary: str, name: str, entrypoint: list[str]) -> bytes:
    """An OCI image-layout tar of one image called ``name`` (``ctr images import`` reads the
    ``io.containerd.image.name`` annotation)."""
    layer = rootfs_tar(binary)
    layer_gz = gzip.compress(layer, mtime=0)
    arch = _ARCH.get(platform.machine(), platform.machine())
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for dirname in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(dirname)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        layer_digest, layer_size = _blob(tar, layer_gz)
        config = json.dumps({
            "architecture": arch, "os": "linux",
            "config": {"Entrypoint": entrypoint, "Env": ["PATH=/bin"]},
            "rootfs": {"type": "layers",
                       "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
        }).encode()
        config_digest, config_size = _blob(tar, config)
        manifest = json.dumps({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": config_digest, "size": config_size},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                        "digest": layer_digest, "size": layer_size}],
        }).encode()
        manifest_digest, manifest_size = _blob(tar, manifest)
        index = json.dumps({
            "schemaVersion": 2,
            "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                           "digest": manifest_digest, "size": manifest_size,
                           "platform": {"architecture": arch, "os": "linux"},
                           "annotations": {"io.containerd.image.name": name,
                                           "org.opencontainers.image.ref.name": name}}],
        }).encode()
        for file_name, data in (("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'),
                                ("index.json", index)):
            info = tarfile.TarInfo(file_name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()
