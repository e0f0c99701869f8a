#!/bin/bash
# Optional slow lane: run the contract kit through the SG_IO transport. A qemu TCG guest
# (tests/rig/guest/mkguest.sh: Debian kernel + busybox) sees the rig's drive (LUN 1) and
# changer (LUN 3) as /dev/sg* through qemu's iSCSI client; inside it, examples/sg_kit loads
# libreel_plugin_scsi.so and opens both by serial (serial=DRV0000001, serial=LIB0000001).
#
# Needs `tests/rig/setup.sh --guest` (root). Build first:
#   cargo build -p reel-plugin-scsi && cargo build -p reel-plugin-scsi --example sg_kit
# Writes under $G (default /tmp/reel-scsi-guest); tgtd on PORT=3272, CN=10. ~1-2 min.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
rig=$(cd "$here/../../../tests/rig" && pwd)
target=${TARGET:-$(cd "$here/../../../target/debug" && pwd)}
rig_dir=${REEL_RIG_DIR:-/tmp/reel-rig}
G=${G:-/tmp/reel-scsi-guest}
export CN=${CN:-10} PORT=${PORT:-3272} IQN=iqn.2026-11.test:reel-sg DIR=$G/library SIZE_MB=64
export TGTD=${TGTD:-$rig_dir/tgtd}
kernels=("$rig_dir"/guest/linux-image-*.deb)
kernel=${kernels[0]}
[ -f "$kernel" ] || { echo "no kernel package under $rig_dir/guest: run tests/rig/setup.sh --guest" >&2; exit 1; }
bash "$rig/library-down.sh"   # a tgtd an earlier run left on this control instance
trap 'bash "$rig/library-down.sh"' EXIT
rm -rf "$G" && mkdir -p "$G"
cat > "$G/guest-run.sh" <<'EOS'
#!/bin/sh
echo "[guest] sg_kit start"
timeout 600 /reel/sg_kit /reel/libreel_plugin_scsi.so \
  "changer=serial=LIB0000001;drives=serial=DRV0000001;poll_ms=200" "1030>768,1031>769" 2>&1
echo "[guest] sg_kit rc=$?"
EOS
bash "$rig/guest/mkguest.sh" "$G/guest" "$kernel" "$G/guest-run.sh" \
  "$target/examples/sg_kit" "$target/libreel_plugin_scsi.so" >&2
bash "$rig/library-up.sh" >&2
U=iscsi://127.0.0.1:$PORT/$IQN
timeout 900 qemu-system-x86_64 -accel tcg -m 1024 -smp 1 -nographic -no-reboot \
  -kernel "$G/guest/vmlinuz" -initrd "$G/guest/initrd.gz" -append "console=ttyS0 quiet panic=-1" \
  -device virtio-scsi-pci,id=vs \
  -drive "file=$U/1,if=none,id=tape0,format=raw" -device scsi-generic,drive=tape0,bus=vs.0 \
  -drive "file=$U/3,if=none,id=chg0,format=raw" -device scsi-generic,drive=chg0,bus=vs.0 \
  | tee "$G/console.log"
grep -q "sg_kit: OK" "$G/console.log"
