#!/usr/bin/env python3
"""Writes testdata/images/debian12-mini: a tiny OCI image layout standing in for a Debian 12
base: os-release, an apt sources file, and the dpkg status, group and gshadow files of a real
`debootstrap --variant=minbase bookworm` root (debian12-mini-files/), without the binaries. Deterministic: run it again and
the digests do not change. The real Debian base for the package tests is made by debootstrap."""
import gzip, hashlib, io, json, os, shutil, sys, tarfile

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "debian12-mini")
OS_RELEASE = b'''PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
HOME_URL="https://www.debian.org/"
'''
FILES = [
    ("usr/lib/os-release", OS_RELEASE, None),
    ("etc/os-release", None, "../usr/lib/os-release"),
    # Debian 12 is merged-/usr: packages' /lib paths must land in /usr/lib.
    ("bin", None, "usr/bin"), ("sbin", None, "usr/sbin"), ("lib", None, "usr/lib"), ("lib64", None, "usr/lib64"),
    ("etc/apt/sources.list.d/debian.sources",
     b"Types: deb\nURIs: http://archive.invalid/debian\nSuites: bookworm\nComponents: main\n"
     b"Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n", None),
]
HERE = os.path.dirname(os.path.abspath(__file__))
for name, path, mode in [("status", "var/lib/dpkg/status", 0o644), ("group", "etc/group", 0o644), ("gshadow", "etc/gshadow", 0o640)]:
    with open(os.path.join(HERE, "debian12-mini-files", name), "rb") as f:
        FILES.append((path, f.read(), None))
MODES = {"etc/gshadow": 0o640}

def blob(data):
    d = hashlib.sha256(data).hexdigest()
    with open(os.path.join(OUT, "blobs/sha256", d), "wb") as f:
        f.write(data)
    return "sha256:" + d

def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(os.path.join(OUT, "blobs/sha256"))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as t:
        dirs = sorted({"/".join(p.split("/")[:i]) for p, _, _ in FILES for i in range(1, p.count("/") + 1)})
        for d in dirs:
            ti = tarfile.TarInfo(d + "/"); ti.type = tarfile.DIRTYPE; ti.mode = 0o755; t.addfile(ti)
        for path, data, link in sorted(FILES):
            ti = tarfile.TarInfo(path)
            if link:
                ti.type = tarfile.SYMTYPE; ti.linkname = link; t.addfile(ti)
            else:
                ti.size = len(data); ti.mode = MODES.get(path, 0o644); t.addfile(ti, io.BytesIO(data))
    tar = raw.getvalue()
    gz = gzip.compress(tar, mtime=0)
    layer = blob(gz)
    config = {
        "architecture": "amd64", "os": "linux", "created": "2024-01-01T00:00:00Z",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], "Cmd": ["bash"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar).hexdigest()]},
        "history": [{"created": "2024-01-01T00:00:00Z", "created_by": "make-debian12-mini.py"}],
    }
    cfg = json.dumps(config, separators=(",", ":")).encode()
    manifest = {
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": blob(cfg), "size": len(cfg)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer, "size": len(gz)}],
    }
    m = json.dumps(manifest, separators=(",", ":")).encode()
    index = {"schemaVersion": 2, "manifests": [{"mediaType": manifest["mediaType"], "digest": blob(m), "size": len(m),
             "annotations": {"org.opencontainers.image.ref.name": "latest"}}]}
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(OUT, "oci-layout"), "w") as f:
        f.write('{"imageLayoutVersion":"1.0.0"}')

if __name__ == "__main__":
    sys.exit(main())
