#!/usr/bin/env python3
"""Add one file to the image TAG of an OCI image layout, as a new top layer (in place).

usage: oci_add_file.py LAYOUT_DIR TAG PATH_IN_IMAGE SOURCE_FILE

The benchmarks use it to give a fixture base one more file (a `.repo` file naming a second
repository) without rebuilding it. The layer is a gzip'd tar holding the file (mode 0644,
root-owned, directories implied); the config's `rootfs.diff_ids` and history, the manifest and
`index.json` are rewritten with the new digests.
"""
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile


def blob(layout, data):
    digest = hashlib.sha256(data).hexdigest()
    with open(os.path.join(layout, "blobs", "sha256", digest), "wb") as f:
        f.write(data)
    return "sha256:" + digest


def read(layout, digest):
    with open(os.path.join(layout, "blobs", "sha256", digest.split(":", 1)[1]), "rb") as f:
        return f.read()


def main(layout, tag, path, source):
    with open(source, "rb") as f:
        content = f.read()
    tar_bytes = io.BytesIO()
    with tarfile.open(fileobj=tar_bytes, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(path.lstrip("/"))
        info.size, info.mode, info.mtime = len(content), 0o644, 1704067200
        tar.addfile(info, io.BytesIO(content))
    diff_id = "sha256:" + hashlib.sha256(tar_bytes.getvalue()).hexdigest()
    gz = gzip.compress(tar_bytes.getvalue(), mtime=0)
    layer = blob(layout, gz)
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    entry = next(m for m in index["manifests"]
                 if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag)
    manifest = json.loads(read(layout, entry["digest"]))
    config = json.loads(read(layout, manifest["config"]["digest"]))
    config["rootfs"]["diff_ids"].append(diff_id)
    config.setdefault("history", []).append({"created_by": f"oci_add_file.py {path}"})
    config_bytes = json.dumps(config).encode()
    manifest["config"].update(digest=blob(layout, config_bytes), size=len(config_bytes))
    manifest["layers"].append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                               "digest": layer, "size": len(gz)})
    manifest_bytes = json.dumps(manifest).encode()
    entry.update(digest=blob(layout, manifest_bytes), size=len(manifest_bytes))
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump(index, f)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
