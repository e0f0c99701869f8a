#!/bin/bash
# Optional slow lane: run the contract kit through the SG_IO transport. A qemu TCG guest
# (Debian kernel + busybox, ../shared/rig/qemu/mkguest.sh) sees the tgt drive (LUN 1) and
# changer (LUN 3) as /dev/sg* through qemu's iSCSI client; inside it, examples/sg_kit loads
# libreel_plugin_scsi.so and opens both by serial (serial:DRV0000001, serial:LIB0000001).
#
# Needs the rig (tests/rig.sh) and: apt-get install qemu-system-x86 qemu-block-extra
# busybox-static mt-st mtx cpio kmod. Build first:
#   cargo build -p reel-plugin-scsi && cargo build -p reel-plugin-scsi --example sg_kit
# Writes under $G (default /tmp/reel-scsi-guest); tgtd on PORT=3271, CN=8. ~1-2 min.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RIG=${RIG:-$(readlink -f "$HERE/../../../../shared/rig")}
TARGET=${TARGET:-$(readlink -f "$HERE/../../../target/debug")}
G=${G:-/tmp/reel-scsi-guest}
export CN=${CN:-8} PORT=${PORT:-3271} IQN=iqn.2026-11.test:reel-sg VTL=$G/vtl SIZE_MB=64
TGTD=${TGTD:-/tmp/tgt-build/src/tgt/usr/tgtd}
rm -rf "$G" && mkdir -p "$G/extra/usr/bin" "$G/extra/lib/reel"
cat > "$G/guesttest.sh" <<'EOS'
#!/bin/sh
echo "[guest] sg_kit start"
timeout 600 /usr/bin/sg_kit /lib/reel/libreel_plugin_scsi.so \
  "changer=serial:LIB0000001;drives=serial:DRV0000001;poll_ms=200" "1030>768,1031>769" 2>&1
echo "[guest] sg_kit rc=$?"
EOS
G=$G bash "$RIG/qemu/mkguest.sh" >&2
# a second cpio archive appended to the initramfs: the kit binary, the plugin and their libs
cp "$TARGET/examples/sg_kit" "$G/extra/usr/bin/"
cp "$TARGET/libreel_plugin_scsi.so" "$G/extra/lib/reel/"
for b in "$TARGET/examples/sg_kit" "$TARGET/libreel_plugin_scsi.so"; do
  for l in $(ldd "$b" | grep -o '/[^ ]*'); do mkdir -p "$G/extra$(dirname "$l")"; cp -n "$l" "$G/extra$l" || true; done
done
(cd "$G/extra" && find . | cpio -o -H newc --quiet | gzip -1) >> "$G/initrd.gz"
TGTD=$TGTD bash "$RIG/vtl-up.sh" >&2
trap 'bash "$RIG/vtl-down.sh"' EXIT
U=iscsi://127.0.0.1:$PORT/$IQN
timeout 900 qemu-system-x86_64 -accel tcg -m 1024 -smp 1 -nographic -no-reboot \
  -kernel "$G/vmlinuz" -initrd "$G/initrd.gz" -append "console=ttyS0 quiet panic=-1" \
  -device virtio-scsi-pci,id=vs \
  -drive file=$U/1,if=none,id=tape0,format=raw -device scsi-generic,drive=tape0,bus=vs.0 \
  -drive file=$U/3,if=none,id=chg0,format=raw -device scsi-generic,drive=chg0,bus=vs.0 \
  | tee "$G/console.log"
grep -q "sg_kit: OK" "$G/console.log"
