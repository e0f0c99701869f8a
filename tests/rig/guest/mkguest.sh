#!/bin/bash
# Build a qemu TCG guest that sees the rig's drives through the Linux st and sg drivers: a
# Debian kernel + busybox initramfs with those drivers, the given programs and shared objects
# (with the shared libraries they need, found with ldd), and a test script the guest's /init
# runs before it powers off. Used by plugins/mhvtl-test/tests/qemu_guest.rs and
# plugins/scsi/tests/qemu-sg.sh.
#
#   tests/rig/guest/mkguest.sh GUEST_DIR KERNEL_DEB GUEST_SCRIPT FILE...
#
# FILEs land in the guest as /reel/<basename>; GUEST_SCRIPT as /reel/guest-run.sh.
# Needs: busybox-static cpio kmod dpkg (tests/rig/setup.sh --guest installs them).
set -euo pipefail
G=$1; KDEB=$(readlink -f "$2"); SCRIPT=$(readlink -f "$3"); shift 3
FILES=()
for f in "$@"; do FILES+=("$(readlink -f "$f")"); done
mkdir -p "$G"; cd "$G"
KPKG=$(basename "$KDEB" .deb); KV=${KPKG#linux-image-}
# the kernel is extracted once per kernel package
if [ ! -f "vmlinuz-$KV" ] || [ ! -d "k-$KV" ]; then
  rm -rf "k-$KV" && mkdir "k-$KV" && dpkg-deb -x "$KDEB" "k-$KV"
  cp "k-$KV/boot/vmlinuz-$KV" "vmlinuz-$KV"
fi
cp "vmlinuz-$KV" vmlinuz
M=k-$KV/lib/modules/$KV
rm -rf ird
mkdir -p ird/bin ird/usr/bin ird/lib/modules ird/proc ird/sys ird/dev ird/tmp ird/reel
cp "$(command -v busybox)" ird/bin/busybox
for a in $(ird/bin/busybox --list); do [ "$a" = busybox ] || ln -sf busybox "ird/bin/$a"; done
# modules in dependency order (no depmod needed)
declare -A seen; n=0
add() { local m=$1; [ -n "${seen[$m]:-}" ] && return; seen[$m]=1
        local f; f=$(find "$M" -name "$m.ko" | head -1)
        [ -n "$f" ] || { echo "module $m not found in $KPKG" >&2; exit 1; }
        for d in $(modinfo -F depends "$f" | tr , ' '); do add "$d"; done
        n=$((n+1)); cp "$f" "ird/lib/modules/$(printf %02d $n)-$m.ko"; }
for m in virtio_pci virtio_scsi st sg; do add $m; done
for p in "${FILES[@]}"; do
  cp "$p" ird/reel/
  if ldd "$p" | grep -q "not found"; then echo "$p: missing shared libraries" >&2; ldd "$p" >&2; exit 1; fi
  for l in $(ldd "$p" | grep -o '/[^ ]*'); do mkdir -p "ird$(dirname "$l")"; cp -n "$l" "ird$l"; done
done
cp "$SCRIPT" ird/reel/guest-run.sh; chmod +x ird/reel/guest-run.sh
cat > ird/init <<'EOS'
#!/bin/sh
export PATH=/bin:/usr/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for m in /lib/modules/*.ko; do insmod $m; done
i=0; while [ $i -lt 100 ] && ! [ -e /dev/nst0 ]; do sleep 0.1; i=$((i+1)); done
echo "[guest] devices: $(cd /dev && ls -d st* nst* sg* 2>/dev/null | tr '\n' ' ')"
for s in /sys/class/scsi_generic/*; do
  echo "[guest] $(basename $s): type $(cat $s/device/type) $(cat $s/device/vendor) $(cat $s/device/model) vpd_pg80 $([ -e $s/device/vpd_pg80 ] && echo present || echo absent)"
done
/reel/guest-run.sh
poweroff -f
EOS
chmod +x ird/init
(cd ird && find . | cpio -o -H newc --quiet | gzip -1) > initrd.gz
echo "guest: $G/vmlinuz $G/initrd.gz ($KV)"
