#!/bin/sh
printf 'changer=serial=LIB0000001\ndrives=serial=DRV0000001\n' > /tmp/reel.conf
/reel/mtx -f /dev/sg1 load 1 0 2>&1 || true
timeout 60 /reel/st_smoke /tmp/reel.conf 2>&1
dmesg | tail -5
