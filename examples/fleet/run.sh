#!/usr/bin/env bash
# A fleet of three replicas as one versioned system (docs/fleet.md), with the CLI daemons:
#
#   1. a local etcd (the registry and the fleet's policy: max_lag 0, strictly on-policy);
#   2. three replicas r0, r1, r2, each a `wtx coordinator` and one `wtx rank --fleet rollout`;
#   3. five update steps of lineage "grpo" on every live replica, r2 killed (SIGKILL, both of
#      its processes) after step 2 and restarted on its journals after step 5: it comes back
#      held at step 2 (its bytes died with its process, and it is three steps behind), never
#      routable;
#   4. `wtx fleet catch-up --replica r2`: its rank copies r0's live bytes, committed only as
#      r0's version; r2 serves step 5 again.
#
# Prints `wtx fleet status --json` (one line each) after step 2, after the restart (before
# catch-up) and, as its last line, after catch-up. Exits non-zero if any step fails.
#
#     examples/fleet/run.sh            # the build tree's wtx (build/bin/wtx), /usr/bin/etcd
#     WTX_BIN=/usr/local/bin/wtx ETCD_BIN=/opt/etcd/etcd examples/fleet/run.sh
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
WTX="${WTX_BIN:-$repo/build/bin/wtx}"
ETCD="${ETCD_BIN:-$(command -v etcd || echo /usr/bin/etcd)}"
PY="${PYTHON:-/usr/bin/python3}"
MANIFEST="$repo/tests/conformance/models/tiny-manifest.json"
KERNEL="flashinfer-mla/bf16"  # the identity the tiny manifest's derived tensors are built for

work="$(mktemp -d -t wtx-fleet-XXXXXX)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
say() { echo "# $*" >&2; }

# -- etcd --------------------------------------------------------------------------------------
etcd_client=$(free_port)
etcd_peer=$(free_port)
"$ETCD" --name fleet --data-dir "$work/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_client" \
  --advertise-client-urls "http://127.0.0.1:$etcd_client" \
  --listen-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-advertise-peer-urls "http://127.0.0.1:$etcd_peer" \
  --initial-cluster "fleet=http://127.0.0.1:$etcd_peer" --logger zap --log-outputs "$work/etcd.log" \
  >/dev/null 2>&1 &
pids+=($!)
URL="etcd://127.0.0.1:$etcd_client/wtx"
for _ in $(seq 1 200); do
  "$WTX" fleet status --decision-log "$URL" --fleet rollout --decision-log-timeout-ms 200 \
    >/dev/null 2>&1 && break
  sleep 0.1
done
say "etcd at 127.0.0.1:$etcd_client"

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/secret"
chmod 600 "$work/secret"
"$WTX" fleet policy --decision-log "$URL" --fleet rollout --max-lag 0 >/dev/null

# -- replicas ----------------------------------------------------------------------------------
declare -A coord_port control_port coord_pid rank_pid

# wait_ready FILE: until the daemon's ready line is in FILE.
wait_ready() {
  for _ in $(seq 1 300); do
    grep -q '"ready"' "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  echo "no ready line in $1" >&2
  return 1
}

start_replica() {  # start_replica NAME: its coordinator and its rank (journals kept across restarts)
  local r=$1
  : "${coord_port[$r]:=$(free_port)}"
  : "${control_port[$r]:=$(free_port)}"
  "$WTX" coordinator --listen "127.0.0.1:${coord_port[$r]}" --journal "$work/$r/coordinator" \
    --secret-file "$work/secret" --ranks 1 >"$work/$r.coordinator.out" 2>>"$work/$r.coordinator.err" &
  coord_pid[$r]=$!
  pids+=($!)
  wait_ready "$work/$r.coordinator.out"
  "$WTX" rank --connect "127.0.0.1:${coord_port[$r]}" --rank 0 --journal "$work/$r/rank-0" \
    --secret-file "$work/secret" --manifest "$MANIFEST" --kernel-identity "$KERNEL" \
    --control "127.0.0.1:${control_port[$r]}" --backoff-max-ms 100 \
    --fleet rollout --replica "$r" --replica-ranks 1 --fleet-registry "$URL" \
    --fleet-ttl-ms 2000 --fleet-period-ms 200 >"$work/$r.rank.out" 2>>"$work/$r.rank.err" &
  rank_pid[$r]=$!
  pids+=($!)
  wait_ready "$work/$r.rank.out"
  control "${coord_port[$r]}" wait_ranks '{"ranks":[0],"timeout_ms":15000}' >/dev/null
}

control() {  # control PORT METHOD PARAMS: the answer (one JSON line)
  "$WTX" control "127.0.0.1:$1" "$2" "$3" --secret-file "$work/secret" --timeout-ms 30000
}

# step_replica NAME STEP: one full update of lineage grpo at STEP (a deterministic fill per step:
# every replica commits the same version for the same step).
step_replica() {
  local r=$1 step=$2 tx="$1-step-$2" out
  out=$(control "${coord_port[$r]}" begin "{\"req\":{\"tx\":\"$tx\",\"kind\":\"full\",\"base\":\"\",\"modules\":[],\"sources\":[],\"rollback\":false,\"lineage\":\"grpo\",\"step\":$step}}")
  case "$out" in *'"code":"OK"'*) ;; *) echo "begin $tx: $out" >&2; return 1 ;; esac
  control "${control_port[$r]}" step "{\"step\":{\"op\":\"write\",\"param\":\"*\",\"fill\":{\"seed\":$step}}}" >/dev/null
  control "${control_port[$r]}" step '{"step":{"op":"refresh","derived":"*"}}' >/dev/null
  out=$(control "${coord_port[$r]}" commit "{\"tx\":\"$tx\"}")
  case "$out" in *'"decision":"commit"'*) ;; *) echo "commit $tx: $out" >&2; return 1 ;; esac
}

status_json() {  # the fleet status, one line
  "$WTX" fleet status --decision-log "$URL" --fleet rollout --json |
    "$PY" -c 'import json,sys; print(json.dumps(json.load(sys.stdin), sort_keys=True))'
}

# wait_state NAME STATE STEP: until the registry shows replica NAME in STATE at STEP.
wait_state() {
  for _ in $(seq 1 300); do
    status_json | "$PY" -c '
import json, sys
s = json.load(sys.stdin)
r = [x for x in s["replicas"] if x["replica"] == sys.argv[1]]
sys.exit(0 if r and r[0]["state"] == sys.argv[2] and r[0]["step"] == int(sys.argv[3]) else 1)
' "$1" "$2" "$3" && return 0
    sleep 0.1
  done
  echo "replica $1 never showed $2 at step $3: $(status_json)" >&2
  return 1
}

for r in r0 r1 r2; do start_replica "$r"; done
say "three replicas registered in fleet rollout"

for step in 1 2 3 4 5; do
  for r in r0 r1 r2; do
    [ -n "${rank_pid[$r]:-}" ] || continue
    step_replica "$r" "$step"
  done
  say "step $step committed"
  if [ "$step" = 2 ]; then
    for r in r0 r1 r2; do wait_state "$r" serving 2; done
    echo "after step 2: $(status_json)"
    kill -9 "${rank_pid[r2]}" "${coord_pid[r2]}"
    wait "${rank_pid[r2]}" "${coord_pid[r2]}" 2>/dev/null || true
    rank_pid[r2]=""
    say "r2 killed (SIGKILL)"
  fi
done

start_replica r2
wait_state r2 held 2
echo "r2 restarted, before catch-up: $(status_json)"

"$WTX" fleet catch-up --decision-log "$URL" --fleet rollout --replica r2 \
  --coordinator "127.0.0.1:${coord_port[r2]}" --secret-file "$work/secret" >&2
wait_state r2 serving 5
for r in r0 r1; do wait_state "$r" serving 5; done
say "r2 caught up"
status_json
