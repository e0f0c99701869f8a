#!/usr/bin/env bash
# Install the five packages on this machine and run reel from the installed files only, as an
# operator would after `apt install ./reel*.deb`. Needs root (dpkg -i), cargo-deb and a
# workspace build in target/debug (CI builds it first; `--profile release` after
# `cargo build --release --workspace` works the same). Everything it installs is purged on
# exit, so the machine is as it was; a package of reel already installed is refused rather
# than replaced.
#
# It starts the installed binaries as the units would (their ExecStart= and Environment=, user
# reel, state in /var/lib/reel, /etc/reel/reel.toml), not through systemd, which a CI
# container does not run; tests/tests/packaging.rs verifies the units with systemd-analyze.
#
#   packaging/test-installed.sh [--profile dev|release]
set -Eeuo pipefail
cd "$(dirname "$0")/.."
profile=dev
[ "${1:-}" = --profile ] && profile=$2
dir=debug
[ "$profile" = dev ] || dir=$profile

[ "$(id -u)" = 0 ] || { echo "test-installed.sh installs packages: run it as root" >&2; exit 2; }
packages=(reel reel-plugin-sim reel-plugin-scsi reel-plugin-mhvtl reel-plugin-dev)
for p in "${packages[@]}"; do
  if dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    echo "package $p is already installed here: remove it first (this test purges what it installs)" >&2
    exit 2
  fi
done

work=$(mktemp -d /tmp/reel-installed.XXXXXX)
chmod 0755 "$work"
pids=()
cleanup() {
  rc=$?
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  dpkg --purge "${packages[@]}" >/dev/null 2>&1 || true
  rm -rf /var/lib/reel "$work"
  userdel reel 2>/dev/null || true
  groupdel reel 2>/dev/null || true
  exit "$rc"
}
trap cleanup EXIT
trap 'echo "test-installed.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
say() { echo "--- $*"; }

say "packages from the $profile build"
target/$dir/reel man target/man
for p in reel-jobs reel-plugin-sim reel-plugin-scsi reel-plugin-mhvtl reel-plugin-abi; do
  cargo deb --no-build --no-strip --fast --profile "$profile" -p "$p" --output "$work/$p.deb" >/dev/null
done
say "dpkg -i"
dpkg -i "$work"/*.deb >/dev/null
getent passwd reel >/dev/null || { echo "the reel package did not create user reel" >&2; exit 1; }
[ "$(stat -c '%a %U:%G' /etc/reel/reel.toml)" = "640 root:reel" ] || {
  echo "/etc/reel/reel.toml is $(stat -c '%a %U:%G' /etc/reel/reel.toml), not 640 root:reel" >&2; exit 1; }

# From here on only installed files run: the binary is /usr/bin/reel, found through PATH
# with the build tree left out of it.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
cd "$work"
as_reel() { runuser -u reel -- "$@"; }
reel_cmd() { as_reel /usr/bin/reel --config /etc/reel/reel.toml "$@"; }

say "reel plugin ls"
listed=$(reel_cmd --json plugin ls)
for name in sim scsi mhvtl; do
  grep -q "/usr/lib/reel/plugins/libreel_plugin_$name.so" <<<"$listed" || {
    echo "reel plugin ls does not list the installed $name plugin: $listed" >&2; exit 1; }
done

say "reel plugin check sim (the contract kit, from reel and from reel-plugin-dev)"
mkdir -p "$work/check-lib" && chown reel: "$work/check-lib"
reel_cmd plugin check sim "dir=$work/check-lib
sim.clock=instant
sim.cartridges=4
sim.worm_cartridges=1" --yes >"$work/check.log" 2>&1 || { cat "$work/check.log" >&2; exit 1; }
mkdir -p "$work/check-lib2"
/usr/bin/reel-plugin-check /usr/lib/reel/plugins/libreel_plugin_sim.so "dir=$work/check-lib2
sim.clock=instant
sim.cartridges=4
sim.worm_cartridges=1" >"$work/check2.log" 2>&1 || { cat "$work/check2.log" >&2; exit 1; }

say "reel demo, as root in a scratch directory"
mkdir "$work/demo" && (cd "$work/demo" && /usr/bin/reel --data-dir . --json demo >demo.json)
grep -q '"identical": *240' "$work/demo/demo.json" || grep -q '"identical":240' "$work/demo/demo.json" || {
  echo "the installed demo did not recall every file identical:"; cat "$work/demo/demo.json"; exit 1; } >&2

say "the services, from their units"
# What the units set up: the state directory (StateDirectory=reel) and the command lines.
install -d -o reel -g reel -m 0750 /var/lib/reel
unit_cmd() { sed -n 's/^ExecStart=//p' "/usr/lib/systemd/system/$1"; }
unit_env() { sed -n 's/^Environment=//p' "/usr/lib/systemd/system/$1"; }
# The simulator without sleeping out drive time (the shipped config models it in real time).
export REEL_LIBRARY_PLUGIN_CONFIG="dir=/var/lib/reel/sim-library
sim.clock=instant
sim.cartridges=4"
export REEL_SERVE_LISTEN=127.0.0.1:18089
# Mount as soon as work is queued (the shipped thresholds gather work for a while first).
export REEL_SCHEDULER_MAX_AGE_SECONDS=0 REEL_SCHEDULER_MIN_MOUNT_SECONDS=0
# shellcheck disable=SC2046 # the unit's command line, split as systemd splits it
# setpriv execs the command itself (runuser would stay as its parent), so the SIGTERM below
# reaches reel as systemd's would.
(cd /var/lib/reel && exec setpriv --reuid=reel --regid=reel --init-groups \
  env $(unit_env reel-worker.service) $(unit_cmd reel-worker.service)) >"$work/worker.log" 2>&1 &
pids+=($!)
# shellcheck disable=SC2046
(cd /var/lib/reel && exec setpriv --reuid=reel --regid=reel --init-groups \
  env $(unit_env reel-serve.service) $(unit_cmd reel-serve.service)) >"$work/serve.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 50); do
  curl -fsS "http://$REEL_SERVE_LISTEN/healthz" >/dev/null 2>&1 && break
  sleep 0.2
done
curl -fsS "http://$REEL_SERVE_LISTEN/healthz" >/dev/null || {
  echo "the installed reel serve does not answer /healthz:"; cat "$work/serve.log"; exit 1; } >&2

say "intake, archive and recall through the installed worker"
reel_cmd intake --all-new --wait >/dev/null
reel_cmd archive --key-prefix installed/ --wait /usr/share/doc/reel >/dev/null
install -d -o reel -g reel "$work/restore"
reel_cmd recall --prefix installed/ --to "$work/restore" --wait >/dev/null
diff -r /usr/share/doc/reel "$work/restore/installed" || {
  echo "what the installed worker recalled differs from what it archived" >&2; exit 1; }
drives=$(reel_cmd --json drive ls)
[ "$(grep -Ec '"state": *"up"' <<<"$drives")" = 2 ] || {
  echo "reel drive ls does not show the simulator's two drives up: $drives" >&2; exit 1; }

say "a graceful stop"
kill -TERM "${pids[0]}"
if ! wait "${pids[0]}"; then
  echo "the installed worker did not stop cleanly on SIGTERM:" >&2; cat "$work/worker.log" >&2; exit 1
fi
pids=("${pids[@]:1}")
say "the installed packages ran: plugin ls, plugin check, demo, worker and serve"
