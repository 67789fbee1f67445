#!/usr/bin/env bash
# Runs the core benchmark at batch capacity 32 and 64 and prints one combined JSON line.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p bessemer-bench --bin bench-core
cargo build --release -p bessemer-bench --bin bench-core --features batch64 --target-dir target/batch64
out32=$(mktemp); out64=$(mktemp)
trap 'rm -f "$out32" "$out64"' EXIT
./target/release/bench-core "$@" | tee "$out32"
./target/batch64/release/bench-core --skip-sched "$@" | tee "$out64"
python3 - "$out32" "$out64" <<'PY'
import json, sys
def last_json(path):
    lines = [l for l in open(path) if l.startswith("{")]
    return json.loads(lines[-1])
a, b = last_json(sys.argv[1]), last_json(sys.argv[2])
print(json.dumps({"bench": "core", "batch32": a, "batch64": b}, sort_keys=True))
PY
