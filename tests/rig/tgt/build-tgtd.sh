#!/bin/bash
# Build reel's test tgtd: upstream tgt 1.0.85 (the version Debian 12 packages, so the tgtadm
# and tgtimg of Debian's `tgt` package drive it) with reel-ssc.patch applied. Only tgtd is
# built; nothing is installed. About 10 s on two cores.
#
#   tests/rig/tgt/build-tgtd.sh OUT_DIR      # prints OUT_DIR/tgtd on its last line
#
# The source tarball comes from the Debian archive's pool and is checked against its SHA-256
# before anything is built. DEBIAN_MIRROR overrides the archive (default deb.debian.org).
# Needs curl, gcc, make and patch.
set -euo pipefail
out=${1:?usage: build-tgtd.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
version=1.0.85
tarball=tgt_${version}.orig.tar.gz
sha256=b8454e06eaf6f024c1fa39de976c167c1ba7f43535bea96c3c364bd138552d8c
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

mkdir -p "$out"
src=$(mktemp -d "${out%/}/tgt-src.XXXXXX")
trap 'rm -rf "$src"' EXIT
if [ ! -f "$out/$tarball" ]; then
  curl -fsSL --retry 3 -o "$out/$tarball.part" "$mirror/pool/main/t/tgt/$tarball"
  mv "$out/$tarball.part" "$out/$tarball"
fi
if ! echo "$sha256  $out/$tarball" | sha256sum -c --quiet -; then
  rm -f "$out/$tarball"
  echo "build-tgtd: $tarball does not match its SHA-256; removed, run again" >&2
  exit 1
fi
tar -xzf "$out/$tarball" -C "$src" --strip-components=1
patch -s -d "$src" -p1 <"$here/reel-ssc.patch"
make -s -C "$src/usr" -j"$(nproc)" tgtd >/dev/null
install -m 0755 "$src/usr/tgtd" "$out/tgtd"
echo "$out/tgtd"
