#!/bin/bash
# Idempotent setup for the qemu guest test of reel-plugin-mhvtl (tests/qemu_guest.rs).
#
# Installs the Debian packages the test needs (root), builds the patched tgtd (READ POSITION,
# LOCATE, SSC-conformant SPACE/EOD) from Debian's tgt source with the shared rig patch, and
# downloads the Debian kernel image package the guest boots. Safe to run again: every step is
# skipped when its result is already there. Prints the path of the patched tgtd on the last line.
#
#   W=/tmp/reel-mhvtl-rig plugins/mhvtl-test/tests/guest-setup.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RIG=${RIG:-$(cd "$HERE/../../../.." && pwd)/shared/rig}
[ -d "$RIG" ] || RIG=/work/shared/rig
W=${W:-${REEL_MHVTL_RIG:-/tmp/reel-mhvtl-rig}}
mkdir -p "$W"
export DEBIAN_FRONTEND=noninteractive

PKGS=(qemu-system-x86 qemu-block-extra busybox-static mt-st mtx cpio kmod tgt libiscsi-dev
      libiscsi-bin sg3-utils dpkg-dev gcc make patch)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "guest-setup: installing ${missing[*]}" >&2
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# patched tgtd (build-patched-tgtd.sh writes only under its $W)
TGTD="$W/tgt-build/src/tgt/usr/tgtd"
if [ ! -x "$TGTD" ]; then
  echo "guest-setup: building the patched tgtd" >&2
  TGTD=$(W="$W/tgt-build" "$RIG/build-patched-tgtd.sh")
fi

# the Debian kernel package the guest boots (extracted by mkguest-reel.sh)
mkdir -p "$W/guest"
KPKG=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
if [ ! -f "$W/guest/$KPKG.deb" ]; then
  echo "guest-setup: downloading $KPKG" >&2
  (cd "$W/guest" && apt-get download "$KPKG" >/dev/null 2>&1 && mv "${KPKG}"_*.deb "$KPKG.deb")
fi
echo "$TGTD"
