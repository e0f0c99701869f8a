#!/bin/bash
# Prepare this machine for reel's SCSI rig tests (root; safe to run again, every step is
# skipped when its result is there). Prints the path of the patched tgtd on its last line.
#
#   tests/rig/setup.sh            # tgt's tools, libiscsi, reel's tgtd: for reel-plugin-scsi
#                                 # (plugins/scsi/tests/tgt.rs, tests/tests/cli_scsi_tgt.rs)
#   tests/rig/setup.sh --guest    # also qemu, busybox and a Debian kernel package for the
#                                 # kernel st/sg guest (plugins/mhvtl-test/tests/qemu_guest.rs)
#
# Everything it makes goes under REEL_RIG_DIR (default /tmp/reel-rig): tgtd and guest/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${REEL_RIG_DIR:-/tmp/reel-rig}
guest=
[ "${1:-}" = --guest ] && guest=1
export DEBIAN_FRONTEND=noninteractive

packages=(tgt libiscsi-dev libiscsi-bin curl gcc make patch)
[ -n "$guest" ] && packages+=(qemu-system-x86 qemu-block-extra busybox-static cpio kmod)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "rig setup: installing ${missing[*]}" >&2
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

mkdir -p "$dir"
# rebuilt whenever the patch changes
stamp=$(sha256sum "$here/tgt/reel-ssc.patch" "$here/tgt/build-tgtd.sh" | sha256sum | cut -c1-16)
if [ ! -x "$dir/tgtd" ] || [ "$(cat "$dir/tgtd.stamp" 2>/dev/null)" != "$stamp" ]; then
  echo "rig setup: building tgtd with reel-ssc.patch" >&2
  bash "$here/tgt/build-tgtd.sh" "$dir" >&2
  echo "$stamp" >"$dir/tgtd.stamp"
fi

if [ -n "$guest" ]; then
  # the kernel the guest boots: the package Debian's linux-image-amd64 points at
  mkdir -p "$dir/guest"
  kernel=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  [ -n "$kernel" ] || { echo "rig setup: apt knows no linux-image-amd64" >&2; exit 1; }
  if [ ! -f "$dir/guest/$kernel.deb" ]; then
    echo "rig setup: downloading $kernel" >&2
    (cd "$dir/guest" && apt-get download "$kernel" >&2 && mv "${kernel}"_*.deb "$kernel.deb")
  fi
fi
echo "$dir/tgtd"
