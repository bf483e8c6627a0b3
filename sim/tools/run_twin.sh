#!/usr/bin/env bash
# The shared bench's run.sh with kinformer-bench-serve (the twin of serve.py, JSON and kube
# protobuf) in place of `python3 serve.py`; the same options, output and exit codes:
#
#   bash sim/tools/run_twin.sh [--pods N] [--events M] [--handlers K] [--seed S] [--timeout SECS] [--logs DIR] -- <client command...>
#
# BENCH is the shared bench's directory (default /work/shared/bench); TWIN the twin's binary
# (default target/release/kinformer-bench-serve of this repository, or of $CARGO_TARGET_DIR).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BENCH="${BENCH:-/work/shared/bench}"
TWIN="${TWIN:-${CARGO_TARGET_DIR:-$ROOT/target}/release/kinformer-bench-serve}"
[[ -x "$TWIN" ]] || { echo "run_twin.sh: no $TWIN (cargo build --release -p kinformer-sim --bin kinformer-bench-serve)" >&2; exit 2; }
[[ -f "$BENCH/run.sh" ]] || { echo "run_twin.sh: no $BENCH/run.sh (set BENCH)" >&2; exit 2; }
SCRIPT="$(mktemp "${TMPDIR:-/tmp}/run-twin.XXXXXX")"
trap 'rm -f "$SCRIPT"' EXIT
sed "s|python3 \"\$HERE/serve.py\"|\"$TWIN\"|" "$BENCH/run.sh" >"$SCRIPT"
grep -qF "\"$TWIN\" --pods" "$SCRIPT" || { echo "run_twin.sh: run.sh no longer starts serve.py as expected" >&2; exit 2; }
set +e
bash "$SCRIPT" "$@"
RC=$?
exit "$RC"
