#!/usr/bin/env bash
# Writes testdata/repos/debian-demo: a signed apt repository in Debian's layout
# (dists/bookworm/main/binary-amd64) with the real Debian 12 rdma-core packages and the libnl
# libraries they need, for the offline demo (scripts/demo). The signing key is made here, its
# public half kept as demo-key.asc, and its secret half thrown away: TEST ONLY, never trust it.
# Needs: apt-get (download from the machine's configured archive), apt-ftparchive, gpg, xz.
set -euo pipefail
cd "$(dirname "$0")"
OUT=debian-demo
rm -rf "$OUT" && mkdir -p "$OUT/pool/main" "$OUT/dists/bookworm/main/binary-amd64"
(cd "$OUT/pool/main" && apt-get download -q libibverbs1 ibverbs-providers ibverbs-utils librdmacm1 libnl-3-200 libnl-route-3-200)
(cd "$OUT" && apt-ftparchive packages pool > dists/bookworm/main/binary-amd64/Packages)
xz -k9 "$OUT/dists/bookworm/main/binary-amd64/Packages"
gzip -k9n "$OUT/dists/bookworm/main/binary-amd64/Packages"
(cd "$OUT/dists/bookworm" && apt-ftparchive \
    -o APT::FTPArchive::Release::Origin=erdma-kit-demo -o APT::FTPArchive::Release::Label=erdma-kit-demo \
    -o APT::FTPArchive::Release::Suite=bookworm -o APT::FTPArchive::Release::Codename=bookworm \
    -o APT::FTPArchive::Release::Architectures=amd64 -o APT::FTPArchive::Release::Components=main \
    release . > Release)
GNUPGHOME=$(mktemp -d); export GNUPGHOME
trap 'gpgconf --kill all; rm -rf "$GNUPGHOME"' EXIT
gpg --batch -q --passphrase '' --quick-gen-key "erdma-kit demo repository (TEST ONLY)" ed25519 sign never
gpg --batch -q --armor --export > "$OUT/demo-key.asc"
gpg --batch -q --clearsign -o "$OUT/dists/bookworm/InRelease" "$OUT/dists/bookworm/Release"
gpg --batch -q --armor --detach-sign -o "$OUT/dists/bookworm/Release.gpg" "$OUT/dists/bookworm/Release"
du -sh "$OUT"
