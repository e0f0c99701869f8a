#!/bin/bash
# Start a tgtd and give it a tape library for reel's tests, on loopback only:
#
#   LUN 1, 2  drives, IBM ULT3580-TD9, serials DRV0000001 and DRV0000002
#   LUN 3     changer, IBM 3573-TL, serial LIB0000001
#   elements  picker 1, drives 256-257, import/export 768-771, slots 1024-1031
#   media     GFS001L9 .. GFS008L9 in slots 1024-1031, SIZE_MB each
#
# Env: TGTD (the patched tgtd, tests/rig/setup.sh builds it), DIR (cartridge images, the
# log and the pid; created), PORT (iSCSI portal), CN (tgtd control instance), IQN, SIZE_MB.
# Each test uses its own PORT and CN so that two never meet. Stop it with library-down.sh.
set -euo pipefail
: "${TGTD:?set TGTD to the patched tgtd (tests/rig/setup.sh prints it)}"
: "${DIR:?set DIR to a directory for the library}"
PORT=${PORT:-3270}
CN=${CN:-7}
IQN=${IQN:-iqn.2026-11.test:reel}
SIZE_MB=${SIZE_MB:-1024}
mkdir -p "$DIR"
adm() { tgtadm -C "$CN" --lld iscsi "$@"; }
lun() { adm --mode logicalunit --tid 1 "$@"; }

"$TGTD" -f -C "$CN" --iscsi "portal=127.0.0.1:$PORT" >"$DIR/tgtd.log" 2>&1 &
pid=$!
echo "$pid" >"$DIR/tgtd.pid"
# ready when it answers on its control instance; a tgtd that exited at once (another one
# holds CN or the port) must not be mistaken for that other one answering
ready=
for _ in $(seq 100); do
  kill -0 "$pid" 2>/dev/null || break
  if adm --mode target --op show >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.05
done
if [ -z "$ready" ] || ! kill -0 "$pid" 2>/dev/null; then
  echo "library-up: tgtd (pid $pid) is not serving control instance $CN and port $PORT" >&2
  cat "$DIR/tgtd.log" >&2
  exit 1
fi

# tgt names a cartridge image by its barcode, in the changer's media_home
for n in 1 2 3 4 5 6 7 8; do
  barcode=GFS00${n}L9
  [ -f "$DIR/$barcode" ] ||
    tgtimg --op new --device-type tape --type data --barcode "$barcode" --size "$SIZE_MB" --file "$DIR/$barcode" >/dev/null
done
# a drive LUN is created with some image behind it; it is taken offline (empty) at once
for d in 1 2; do
  [ -f "$DIR/no-medium-$d" ] ||
    tgtimg --op new --device-type tape --type clean --barcode "" --size 1 --file "$DIR/no-medium-$d" >/dev/null
done
[ -f "$DIR/changer" ] || : >"$DIR/changer"
truncate -s 4096 "$DIR/changer"

adm --mode target --op new --tid 1 --targetname "$IQN"
for d in 1 2; do
  lun --op new --lun "$d" --device-type tape --bstype ssc -b "$DIR/no-medium-$d"
  lun --op update --lun "$d" \
    --params "vendor_id=IBM,product_id=ULT3580-TD9,product_rev=0001,scsi_sn=DRV000000$d,removable=1"
  lun --op update --lun "$d" --params online=0
done
lun --op new --lun 3 --device-type changer -b "$DIR/changer"
lun --op update --lun 3 \
  --params "vendor_id=IBM,product_id=3573-TL,product_rev=0001,scsi_sn=LIB0000001,media_home=$DIR"
# element types: 1 picker, 2 storage, 3 import/export, 4 data transfer
lun --op update --lun 3 --params element_type=1,start_address=1,quantity=1
lun --op update --lun 3 --params element_type=4,start_address=256,quantity=2
for d in 1 2; do
  lun --op update --lun 3 --params "element_type=4,address=$((255 + d)),tid=1,lun=$d"
done
lun --op update --lun 3 --params element_type=3,start_address=768,quantity=4
lun --op update --lun 3 --params element_type=2,start_address=1024,quantity=8
for n in 1 2 3 4 5 6 7 8; do
  lun --op update --lun 3 --params "element_type=2,address=$((1023 + n)),barcode=GFS00${n}L9,sides=1"
done
adm --mode target --op bind --tid 1 -I ALL
echo "library up: iscsi://127.0.0.1:$PORT/$IQN/{1,2: drives; 3: changer}, tgtd pid $(cat "$DIR/tgtd.pid")"
