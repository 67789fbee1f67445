#!/usr/bin/env bash
# Runs the core benchmark at batch capacity 64 (the default) and 32 and prints one combined JSON line.
# NATIVE=1 adds a third run, batch 64 built with -C target-cpu=native (key "native").
# As root it reserves 2 MiB hugepages for the run (as DPDK and BESS setups do) and gives
# back what it reserved afterwards; without them the pool falls back to plain pages.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p bessemer-bench --bin bench-core
cargo build --release -p bessemer-bench --bin bench-core --features batch32 --target-dir target/batch32
if [ "${NATIVE:-0}" = 1 ]; then
  RUSTFLAGS="${RUSTFLAGS:-} -C target-cpu=native" \
    cargo build --release -p bessemer-bench --bin bench-core --target-dir target/native
fi
out32=$(mktemp); out64=$(mktemp); outn=$(mktemp)
. bench/hugepages.sh
hugepages_reserve 64
cleanup() {
  rm -f "$out32" "$out64" "$outn"
  hugepages_restore
}
trap cleanup EXIT
./target/batch32/release/bench-core --skip-sched "$@" | tee "$out32"
./target/release/bench-core "$@" | tee "$out64"
if [ "${NATIVE:-0}" = 1 ]; then
  echo "# the same at batch 64, built with -C target-cpu=native"
  ./target/native/release/bench-core --skip-sched "$@" | tee "$outn"
fi
python3 - "$out32" "$out64" "$outn" <<'PY'
import json, sys
def last_json(path):
    lines = [l for l in open(path) if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None
a, b, n = (last_json(p) for p in sys.argv[1:4])
out = {"bench": "core", "batch32": a, "batch64": b}
if n is not None:
    out["native"] = n
print(json.dumps(out, sort_keys=True))
PY
