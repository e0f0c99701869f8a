#!/bin/bash
# Stop the tgtd that library-up.sh started on control instance CN (its pid is in DIR, when
# DIR is given). tgtd does not stop on SIGTERM while it has targets: remove them, ask it to
# exit, and kill it if it lingers. Also stops a tgtd that an aborted test left on CN.
CN=${CN:-7}
tgt-admin -C "$CN" --update ALL -c /dev/null -f >/dev/null 2>&1
tgtadm -C "$CN" --mode system --op delete >/dev/null 2>&1
if [ -n "${DIR:-}" ] && [ -f "$DIR/tgtd.pid" ]; then
  pid=$(cat "$DIR/tgtd.pid")
  for _ in $(seq 40); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  # only if that pid is still a tgtd (an old pid file may name a reused pid)
  [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = tgtd ] && kill -KILL "$pid" 2>/dev/null
  rm -f "$DIR/tgtd.pid"
fi
exit 0
