#!/usr/bin/env bash
# Memory of the deployment controller scaled out on the Lease ring, one process per replica
# (docs/scaling-out.md): against the sim binary, an unsharded controller runs for a while and
# records its peak RSS; then 3 ring replicas run at once, one is killed (SIGKILL), two more
# start (3 -> 2 -> 4); a table compares each process's peak RSS with the unsharded one and
# says which namespaces each replica owned at the end.
#
#   examples/deployment-controller/scripts/scale-out.sh            # release build, ~2-3 min
#   DEPLOYMENTS=2000 NAMESPACES=60 examples/deployment-controller/scripts/scale-out.sh
#   PROFILE=debug examples/deployment-controller/scripts/scale-out.sh   # no release build
set -euo pipefail

DEPLOYMENTS=${DEPLOYMENTS:-600}
NAMESPACES=${NAMESPACES:-30}
UNSHARDED_SECS=${UNSHARDED_SECS:-30}
BEFORE_KILL_SECS=${BEFORE_KILL_SECS:-25}
AFTER_KILL_SECS=${AFTER_KILL_SECS:-20}
AFTER_GROW_SECS=${AFTER_GROW_SECS:-30}
PROFILE=${PROFILE:-release}

root=$(cd "$(dirname "$0")/../../.." && pwd)
cd "$root"
if [ "$PROFILE" = release ]; then
  cargo build --release -q -p kinformer-sim -p deployment-controller
else
  cargo build -q -p kinformer-sim -p deployment-controller
fi
bin="${CARGO_TARGET_DIR:-$root/target}/$PROFILE"
work=$(mktemp -d /tmp/scale-out.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

wait_for_line() { # FILE PATTERN SECS
  for _ in $(seq 1 $(( $3 * 10 ))); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "timed out waiting for '$2' in $1" >&2
  return 1
}

# The simulated API server (bookmarks every second: the ring's hand-over waits complete on quiet
# shards), then the Deployments and the cluster simulation (ReplicaSet controller, kubelet).
"$bin/kinformer-sim" --port 0 --write-kubeconfig "$work/kubeconfig" --bookmark-interval-secs 1 \
  >"$work/sim.log" 2>&1 &
pids+=($!)
wait_for_line "$work/sim.log" "kubeconfig:" 30
export KUBECONFIG="$work/kubeconfig"
export RUST_LOG=${RUST_LOG:-warn}
"$bin/deployment-controller" --seed-and-simulate --scale-deployments "$DEPLOYMENTS" \
  --scale-namespaces "$NAMESPACES" >"$work/cluster.log" 2>&1 &
pids+=($!)
wait_for_line "$work/cluster.log" "seeded" 120
echo "seeded $DEPLOYMENTS Deployments over $NAMESPACES namespaces (logs: $work)"

# One unsharded controller.
echo "unsharded controller: ${UNSHARDED_SECS}s"
"$bin/deployment-controller" --leader-elect=false --duration "${UNSHARDED_SECS}s" \
  >"$work/unsharded.log" 2>&1

# Ring replicas, one process each: 3, kill one, start two more.
start_replica() {
  "$bin/deployment-controller" --sharded --replica-id "$1" --leader-elect=false \
    >"$work/replica-$1.log" 2>&1 &
  rpid[$1]=$!
  pids+=($!)
}
declare -A rpid
echo "3 ring replicas: ${BEFORE_KILL_SECS}s"
for i in 0 1 2; do start_replica "$i"; done
sleep "$BEFORE_KILL_SECS"
echo "SIGKILL replica 2 (2 left): ${AFTER_KILL_SECS}s"
kill -9 "${rpid[2]}"
sleep "$AFTER_KILL_SECS"
echo "start replicas 3 and 4 (4 running): ${AFTER_GROW_SECS}s"
for i in 3 4; do start_replica "$i"; done
sleep "$AFTER_GROW_SECS"
for i in 0 1 3 4; do kill -TERM "${rpid[$i]}"; done
for i in 0 1 3 4; do wait "${rpid[$i]}" || true; done

peak() { sed -n 's/^peak RSS: \([0-9.]*\) MiB.*/\1/p' "$1" | tail -1; }
owned() { sed -n 's/^replica [0-9]* owned namespaces (\([0-9]*\)).*/\1/p' "$1" | tail -1; }
base=$(peak "$work/unsharded.log")
echo
printf '%-12s %-10s %14s %12s %18s\n' process state "peak RSS MiB" "vs unsharded" "owned namespaces"
printf '%-12s %-10s %14s %12s %18s\n' unsharded done "${base:-?}" "1.00" "$NAMESPACES (all)"
for i in 0 1 2 3 4; do
  f="$work/replica-$i.log"
  if [ "$i" = 2 ]; then
    printf '%-12s %-10s %14s %12s %18s\n' "replica-$i" killed "-" "-" "-"
    continue
  fi
  p=$(peak "$f")
  ratio=$(awk -v p="${p:-0}" -v b="${base:-0}" 'BEGIN { if (b > 0 && p > 0) printf "%.2f", p / b; else print "?" }')
  printf '%-12s %-10s %14s %12s %18s\n' "replica-$i" stopped "${p:-?}" "$ratio" "$(owned "$f")"
done
