#!/usr/bin/env bash
# Schemathesis against the OpenAPI document `reel serve` really serves: every operation gets
# bounded generated requests with an admin token, and every answer is checked against the
# document (status codes, content types, schemas) and for 5xx. Runs `reel serve` (and a worker
# with the simulator, so staged and archived objects exist) from target/debug on a scratch data
# directory; everything stays on loopback.
#
# Every check runs but `positive_data_acceptance`: schema-valid requests that name things that
# do not exist (an unknown storage class or container, a path outside the token's roots, a
# verify with none of its three selectors) are rightly refused with 400/403, which the document
# cannot express as schema.
#
# Usage: tests/schemathesis/run.sh [MAX_EXAMPLES]   (default 50 per operation)
# Needs: `pip install schemathesis` (CI installs it), a built workspace (target/debug).
set -euo pipefail
cd "$(dirname "$0")/../.."
examples="${1:-50}"
reel="$PWD/target/debug/reel"
plugin="$PWD/target/debug/deps/libreel_plugin_sim.so"
[ -x "$reel" ] && [ -f "$plugin" ] || { echo "build the workspace first (cargo build --workspace)"; exit 1; }
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/data" "$work/lib" "$work/root"
cat > "$work/data/reel.toml" <<TOML
[store]
url = "sqlite:reel.db"
jobs_url = "sqlite:jobs.db"

[library]
plugin = "$plugin"
plugin_config = "dir=$work/lib\nsim.clock=instant\nsim.calibrated=true\nsim.drives=1\nsim.cartridges=6"

[worker]
poll_interval_ms = 100
heartbeat_ms = 1000
lease_ms = 4000

[serve]
rate_per_second = 0
max_object_bytes = 1048576
TOML
token=$("$reel" --json --data-dir "$work/data" token create --name fuzz --scope admin \
          --root "$work/root" --key-prefix '' | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
"$reel" --data-dir "$work/data" worker > "$work/worker.log" 2>&1 & pids+=($!)
"$reel" --data-dir "$work/data" serve --listen 127.0.0.1:0 > "$work/serve.log" 2>&1 & pids+=($!)
addr=""
for _ in $(seq 1 100); do
  addr=$(grep -o 'listening on http://[0-9.:]*' "$work/serve.log" | head -1 | sed 's#.*http://##' || true)
  [ -n "$addr" ] && break
  sleep 0.2
done
[ -n "$addr" ] || { cat "$work/serve.log"; echo "reel serve did not start"; exit 1; }
echo "reel serve on $addr; $examples examples per operation"
# A little data, so the catalogue, staging and job routes have something real to answer.
curl -fsS -H "Authorization: Bearer $token" -XPOST "http://$addr/v1/jobs/intake" \
     -H 'content-type: application/json' -d '{"all_new": true}' >/dev/null
echo hello > "$work/root/a.txt"
curl -fsS -H "Authorization: Bearer $token" -XPUT "http://$addr/v1/objects/k/a.txt" \
     --data-binary @"$work/root/a.txt" >/dev/null
# From the scratch directory, so Schemathesis keeps its cache there, not in the repository.
cd "$work"
st run "http://$addr/openapi.json" \
  --header "Authorization: Bearer $token" \
  --max-examples "$examples" \
  --checks all \
  --exclude-checks positive_data_acceptance \
  --request-timeout 30 \
  --seed 4242 \
  --suppress-health-check all
