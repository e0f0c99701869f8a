#!/bin/bash
# Install the tgt test rig for reel-plugin-scsi's integration tests (tests/tgt.rs).
# Idempotent: installs Debian packages only when missing and builds the patched tgtd
# (READ POSITION, LOCATE, SPACE/EOD, early warning; see ../shared/rig/README.md) only once.
# Prints the path of the tgtd binary to use on its last line of stdout.
#
#   export TGTD=$(plugins/scsi/tests/rig.sh)
#   cargo build -p reel-plugin-scsi          # the test dlopens the cdylib; `cargo test` builds only the rlib
#   CI=true cargo test -p reel-plugin-scsi   # tests/tgt.rs fails instead of skipping when CI=true
#
# The test brings its own library up (vtl-up.sh, private port 3270 / control port 7, images
# in a temp dir) and down again; override with REEL_TGT_PORT / REEL_TGT_CN.
#
# Env: RIG (default: the shared rig directory), W (build dir, default /tmp/tgt-build).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RIG=${RIG:-$(readlink -f "$HERE/../../../../shared/rig" 2>/dev/null || echo /work/shared/rig)}
W=${W:-/tmp/tgt-build}
export DEBIAN_FRONTEND=noninteractive
need=()
command -v tgtd >/dev/null 2>&1 || need+=(tgt)
command -v iscsi-inq >/dev/null 2>&1 || need+=(libiscsi-bin)
ldconfig -p | grep -q 'libiscsi\.so\.7' || need+=(libiscsi-dev)
[ -f /usr/include/iscsi/iscsi.h ] || need+=(libiscsi-dev)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends tgt libiscsi-dev libiscsi-bin >&2
fi
if [ ! -x "$W/src/tgt/usr/tgtd" ]; then
  W="$W" "$RIG/build-patched-tgtd.sh" >&2
fi
echo "$W/src/tgt/usr/tgtd"
