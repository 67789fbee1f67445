#!/usr/bin/env bash
# `make demo`: starts bessemerd, runs conf/demo.bess, shows `monitor pipeline` for a few
# seconds and the measured latency, then stops the daemon (also on failure or Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_SHOW=${DEMO_SECONDS:-5}
BESSEMER=.venv/bin/bessemer
export BESSEMERD=${BESSEMERD:-$PWD/target/release/bessemerd}
port=${BESSEMER_PORT:-10514}
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
  echo "demo: port $port is taken (another daemon?); using a free port instead"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
fi
B() { "$BESSEMER" --port "$port" "$@"; }
stop() { B daemon stop >/dev/null 2>&1 || true; }
trap stop EXIT
B daemon start --no-hugepages --buffers 16384
B run conf/demo.bess
echo
B show pipeline
echo
B monitor pipeline --seconds "$SECONDS_TO_SHOW"
echo
B command module measure get_summary MeasureCommandGetSummaryArg "{'latency_percentiles': [50, 99]}" || true
stop
trap - EXIT
