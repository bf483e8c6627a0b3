#!/usr/bin/env bash
# Runs a benchmark client pinned to one core (issue 27, item 6): a wrapper for the command
# given to the shared harness's run.sh, which appends `--handlers K` to it:
#
#   bash $BENCH/run.sh --pods 50000 --events 100000 --handlers 10 -- \
#       benches/pinned.sh target/release/examples/bench --lean
#   bash $BENCH/run.sh --handlers 10 -- \
#       benches/pinned.sh $BENCH/peers/kube-rs/target/release/kube-rs-informer-bench
#
# The client and every thread it starts (decode pool, arbiters, handler threads, tokio workers)
# run on the CPUs of KINFORMER_PIN_CPUS (default `0`, taskset's list syntax); the server
# (serve.py) is not pinned. `exec` keeps the client's PID, so /usr/bin/time -v measures the
# client itself (peak RSS, cpu_s), not a shell.
set -euo pipefail
if [ "$#" -eq 0 ]; then
    echo "usage: $0 CLIENT [ARGS...]" >&2
    exit 2
fi
exec taskset -c "${KINFORMER_PIN_CPUS:-0}" "$@"
