#!/usr/bin/env python3
"""Wraps a root filesystem tar (mmdebstrap's output) as a one-layer OCI image archive
(oci-archive: an OCI image layout in a tar, which `podman load`, `skopeo` and
`ctr images import` read), deterministically: entries sorted, times clamped to
SOURCE_DATE_EPOCH, owners numeric, gzip without name or time, so the same root gives the same
layer, config and manifest digests. Extended attributes (file capabilities) are kept.

    mkoci.py ROOTFS.tar OUT.oci.tar --tag NAME:TAG --config config.json
Prints the manifest digest and the compressed size on stdout as JSON.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile


def rel(name: str) -> str:
    """A member name relative to the root: without a leading "./" or "/"."""
    name = name.removeprefix("./")
    return name.lstrip("/").rstrip("/") if name not in (".", "") else ""


def normalized_layer(rootfs: str, epoch: int) -> bytes:
    """The root as an uncompressed tar: sorted, clamped times, numeric owners."""
    out = io.BytesIO()
    with (
        tarfile.open(rootfs, "r:*") as src,
        tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst,
    ):
        members = sorted(src.getmembers(), key=lambda m: rel(m.name))
        for m in members:
            if not rel(m.name):
                continue  # the root itself is implied
            m.name = rel(m.name)
            if m.islnk():
                m.linkname = rel(m.linkname)
            m.mtime = min(int(m.mtime), epoch)
            m.uname = m.gname = ""
            # Keep xattrs (security.capability); drop the times pax adds.
            m.pax_headers = {
                k: v for k, v in m.pax_headers.items() if k.startswith("SCHILY.xattr.")
            }
            f = src.extractfile(m) if m.isreg() else None
            dst.addfile(m, f)
    return out.getvalue()


def gz(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=6) as g:
        g.write(data)
    return buf.getvalue()


def blob(tar: tarfile.TarFile, data: bytes, epoch: int) -> str:
    d = hashlib.sha256(data).hexdigest()
    add(tar, f"blobs/sha256/{d}", data, epoch)
    return d


def add(tar: tarfile.TarFile, name: str, data: bytes, epoch: int) -> None:
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = epoch
    ti.mode = 0o644
    tar.addfile(ti, io.BytesIO(data))


def canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rootfs")
    ap.add_argument("out")
    ap.add_argument("--tag", required=True, help="NAME:TAG, e.g. localhost/bessemer:0.1.0")
    ap.add_argument(
        "--config", required=True, help="JSON: the image config's 'config' part and labels"
    )
    a = ap.parse_args(argv)
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    layer = normalized_layer(a.rootfs, epoch)
    layer_gz = gz(layer)
    with open(a.config) as f:
        cfg = json.load(f)
    created = __import__("datetime").datetime.fromtimestamp(
        epoch, __import__("datetime").timezone.utc
    )
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "config": cfg,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
        "history": [
            {
                "created": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "created_by": "mmdebstrap + deploy/image/mkoci.py",
            }
        ],
    }
    with (
        open(a.out + ".tmp", "wb") as f,
        tarfile.open(fileobj=f, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        add(tar, "oci-layout", canonical({"imageLayoutVersion": "1.0.0"}), epoch)
        ld = blob(tar, layer_gz, epoch)
        cfg_bytes = canonical(config)
        cd = blob(tar, cfg_bytes, epoch)
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": "sha256:" + cd,
                "size": len(cfg_bytes),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": "sha256:" + ld,
                    "size": len(layer_gz),
                }
            ],
            "annotations": {
                k: v
                for k, v in cfg.get("Labels", {}).items()
                if k.startswith("org.opencontainers.")
            },
        }
        man_bytes = canonical(manifest)
        md = blob(tar, man_bytes, epoch)
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": "sha256:" + md,
                    "size": len(man_bytes),
                    "annotations": {
                        "org.opencontainers.image.ref.name": a.tag.rsplit(":", 1)[1],
                        "io.containerd.image.name": a.tag,
                    },
                }
            ],
        }
        add(tar, "index.json", canonical(index), epoch)
    os.replace(a.out + ".tmp", a.out)
    print(
        json.dumps(
            {
                "digest": "sha256:" + md,
                "layer_bytes": len(layer_gz),
                "rootfs_bytes": len(layer),
                "config_digest": "sha256:" + cd,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
