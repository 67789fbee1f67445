#!/usr/bin/env bash
# make bench-upf: two parts, then one JSON line with the keys of both.
#  1. The SD-Core UPF's own script (omec's conf/up4.bess, sim mode, run unchanged by omec's
#     bessctl; sessions from pfcpiface -simulate create) on bessemerd and on the real bessd in
#     the same run, alternated (bench/upf_real.py; root). bessd comes from
#     scripts/build-bessd.sh (cached outside the tree); where it is not built, "BESS not
#     measured" and Bessemer alone.
#  2. Bessemer's own UPF pipeline (conf/upf/upf.bess) in process, with the cost of each stage
#     (bench/src/bench_upf.rs): what bounds the figures.
# ARGS: --quick for a short run of both parts.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
for a in "$@"; do [ "$a" = "--quick" ] && quick=1; done
cargo build --release -p bessemer-daemon -p bessemer-bench --bin bessemerd --bin bench-upf
out=$(mktemp)
trap 'rm -f "$out"' EXIT
if [ "$(id -u)" -eq 0 ]; then
  make -s .venv/.installed >/dev/null
  echo "== up4.bess (omec's script): Bessemer and the real BESS"
  qa=(); [ "$quick" = 1 ] && qa=(--quick)
  BESSEMERD="$PWD/target/release/bessemerd" .venv/bin/python bench/upf_real.py "${qa[@]}" | tee -a "$out"
else
  echo "== up4.bess part skipped: it needs root (network and PID namespaces)"
fi
echo "== Bessemer's own UPF pipeline (conf/upf/upf.bess), in process"
. bench/hugepages.sh
hugepages_reserve 64
trap 'hugepages_restore; rm -f "$out"' EXIT
./target/release/bench-upf "$@" | tee -a "$out"
python3 - "$out" <<'PY'
import json, sys
merged = {"bench": "upf"}
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("UP4_JSON "):
        merged.update(json.loads(line[len("UP4_JSON "):]))
    elif line.startswith("{") and '"bench"' in line:
        d = json.loads(line)
        merged.update({k: v for k, v in d.items() if k != "bench"})
print(json.dumps(merged))
PY
