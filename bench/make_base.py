#!/usr/bin/env python3
"""Write an OCI image layout holding a benchmark base image.

Layer 1: gzip'd tar with one file, data/big.bin, of SIZE pseudo-random bytes (does not
compress, like the bulk of a real CUDA/PyTorch base). Layer 2: a Debian 12 /etc/os-release,
so recipes that detect the distribution accept the base.

Streams to disk; memory use does not grow with SIZE.

usage: make_base.py LAYOUT_DIR TAG SIZE_BYTES
"""
import gzip
import hashlib
import io
import json
import os
import random
import sys
import tarfile
import tempfile

EPOCH = 1704067200  # 2024-01-01T00:00:00Z
CREATED = "2024-01-01T00:00:00Z"
OS_RELEASE = b'''PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
HOME_URL="https://www.debian.org/"
SUPPORT_URL="https://www.debian.org/support"
BUG_REPORT_URL="https://bugs.debian.org/"
'''


class HashWriter:
    """File-like sink that hashes and counts, then passes bytes on."""

    def __init__(self, inner):
        self.inner = inner
        self.sha = hashlib.sha256()
        self.size = 0

    def write(self, b):
        self.sha.update(b)
        self.size += len(b)
        return self.inner.write(b)

    def flush(self):
        self.inner.flush()

    def digest(self):
        return "sha256:" + self.sha.hexdigest()


class RandomReader:
    """`size` pseudo-random bytes, generated on demand."""

    def __init__(self, size, seed=42):
        self.left = size
        self.rng = random.Random(seed)

    def read(self, n=-1):
        if n is None or n < 0 or n > self.left:
            n = self.left
        self.left -= n
        return self.rng.randbytes(n)


def blob_path(layout, digest):
    alg, hexd = digest.split(":", 1)
    return os.path.join(layout, "blobs", alg, hexd)


def write_layer(layout, fill, level):
    blobs = os.path.join(layout, "blobs", "sha256")
    fd, tmp = tempfile.mkstemp(dir=blobs, prefix=".layer-")
    with os.fdopen(fd, "wb") as f:
        outer = HashWriter(f)
        gz = gzip.GzipFile(fileobj=outer, mode="wb", compresslevel=level, mtime=0, filename="")
        inner = HashWriter(gz)
        tar = tarfile.open(fileobj=inner, mode="w|", format=tarfile.GNU_FORMAT, bufsize=1 << 20)
        fill(tar)
        tar.close()
        gz.close()
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, blob_path(layout, outer.digest()))
    return {"digest": outer.digest(), "diff_id": inner.digest(), "size": outer.size}


def info(name, size=0, mode=0o644, kind=tarfile.REGTYPE):
    ti = tarfile.TarInfo(name)
    ti.size, ti.mode, ti.type, ti.mtime = size, mode, kind, EPOCH
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = "root"
    return ti


def write_blob(layout, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    with open(blob_path(layout, digest), "wb") as f:
        f.write(data)
    return digest, len(data)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    layout, tag, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    os.makedirs(os.path.join(layout, "blobs", "sha256"), exist_ok=True)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        f.write('{"imageLayoutVersion":"1.0.0"}')

    def big(tar):
        tar.addfile(info("data/", mode=0o755, kind=tarfile.DIRTYPE))
        tar.addfile(info("data/big.bin", size=size), RandomReader(size))

    def osrel(tar):
        tar.addfile(info("etc/", mode=0o755, kind=tarfile.DIRTYPE))
        tar.addfile(info("etc/os-release", size=len(OS_RELEASE)), io.BytesIO(OS_RELEASE))

    layers = [write_layer(layout, big, 1), write_layer(layout, osrel, 6)]
    config = {
        "created": CREATED,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": ["/bin/sh"],
        },
        "rootfs": {"type": "layers", "diff_ids": [l["diff_id"] for l in layers]},
        "history": [{"created": CREATED, "created_by": "erdma-kit bench base"} for _ in layers],
    }
    cdigest, csize = write_blob(layout, json.dumps(config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdigest, "size": csize},
        "layers": [
            {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": l["digest"], "size": l["size"]}
            for l in layers
        ],
    }
    mdigest, msize = write_blob(layout, json.dumps(manifest).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": mdigest,
            "size": msize,
            "annotations": {"org.opencontainers.image.ref.name": tag},
        }],
    }
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump(index, f)
    print(json.dumps({"manifest": mdigest, "layers": layers}))


if __name__ == "__main__":
    main()
