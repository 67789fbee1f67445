#!/usr/bin/env bash
# Runs the core benchmark at batch capacity 64 (the default) and 32 and prints one combined JSON
# line; the BESS ratios are against the real bessd measured first in the same run, when built.
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
out32=$(mktemp); out64=$(mktemp); outn=$(mktemp); bess=$(mktemp)
# BESS's figures come from the real bessd, measured now on the same pipelines and core
# (bench/vs_bess.sh, BESS alone), when it is built (make bench-vs-bess builds it once);
# otherwise bench-core prints "BESS not measured" instead of ratios.
rows=src_sink,src_sink_burst1,rewrite,chain1,chain8,chain32,random_update,ip_lookup_10k
vs=()
case " $* " in
  *" --quick "*) vs=(--quick) ;;
  *) rows=$rows,ip_lookup_900k ;;
esac
BESS_ONLY=1 bench/vs_bess.sh --check-only --rows "$rows" "${vs[@]}" | tee "$bess"
. bench/hugepages.sh
hugepages_reserve 64
cleanup() {
  rm -f "$out32" "$out64" "$outn" "$bess"
  hugepages_restore
}
trap cleanup EXIT
./target/batch32/release/bench-core --skip-sched --bess "$bess" "$@" | tee "$out32"
./target/release/bench-core --bess "$bess" "$@" | tee "$out64"
if [ "${NATIVE:-0}" = 1 ]; then
  echo "# the same at batch 64, built with -C target-cpu=native"
  ./target/native/release/bench-core --skip-sched --bess "$bess" "$@" | tee "$outn"
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
