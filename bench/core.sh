#!/usr/bin/env bash
# Runs the core benchmark at batch capacity 64 (the default) and 32 and prints one combined JSON line.
# As root it reserves 2 MiB hugepages for the run (as DPDK and BESS setups do) and gives
# back what it reserved afterwards; without them the pool falls back to plain pages.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p bessemer-bench --bin bench-core
cargo build --release -p bessemer-bench --bin bench-core --features batch32 --target-dir target/batch32
out32=$(mktemp); out64=$(mktemp)
. bench/hugepages.sh
hugepages_reserve 64
cleanup() {
  rm -f "$out32" "$out64"
  hugepages_restore
}
trap cleanup EXIT
./target/batch32/release/bench-core --skip-sched "$@" | tee "$out32"
./target/release/bench-core "$@" | tee "$out64"
python3 - "$out32" "$out64" <<'PY'
import json, sys
def last_json(path):
    lines = [l for l in open(path) if l.startswith("{")]
    return json.loads(lines[-1])
a, b = last_json(sys.argv[1]), last_json(sys.argv[2])
print(json.dumps({"bench": "core", "batch32": a, "batch64": b}, sort_keys=True))
PY
