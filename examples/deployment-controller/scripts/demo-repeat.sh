#!/usr/bin/env bash
# Runs the embedded demo (the README's main command) N times in a row (default 50) and counts
# the runs that failed: a non-zero exit status, or an ERROR line in the log. Prints one line
# per run and a summary; exits 1 if any run failed. Logs of failed runs are kept.
#   examples/deployment-controller/scripts/demo-repeat.sh [N]
set -u
n="${1:-50}"
cd "$(dirname "$0")/../../.."
cargo build --release -p deployment-controller --quiet || exit 1
bin=target/release/deployment-controller
logs="$(mktemp -d)"
failed=0
for i in $(seq 1 "$n"); do
  log="$logs/run-$i.log"
  start=$(date +%s.%N)
  # No kubeconfig: the embedded mode, whatever the caller's environment has.
  KUBECONFIG= HOME="$logs" RUST_LOG=info "$bin" --embedded >"$log" 2>&1
  status=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  errors=$(grep -c " ERROR " "$log")
  if [ "$status" -ne 0 ] || [ "$errors" -ne 0 ]; then
    failed=$((failed + 1))
    echo "run $i: FAILED (exit $status, $errors ERROR lines, ${secs}s): $log"
  else
    echo "run $i: ok (${secs}s)"
    rm -f "$log"
  fi
done
echo "demo-repeat: $((n - failed))/$n runs ok, $failed failed"
[ "$failed" -eq 0 ]
