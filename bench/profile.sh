#!/usr/bin/env bash
# Instructions per packet of one bench-core case, by function, counted by callgrind (exact and
# repeatable whatever else the machine does; perf's hardware counters are not available on
# every VM). Usage: bench/profile.sh [CASE] [STEPS]   (default: src_sink_60, 200000 steps)
set -euo pipefail
cd "$(dirname "$0")/.."
case_name=${1:-src_sink_60}
steps=${2:-200000}
if ! command -v valgrind >/dev/null || ! command -v callgrind_annotate >/dev/null; then
  echo "profile: valgrind is missing; install it with 'apt-get install -y valgrind'" >&2
  exit 1
fi
cargo build --release -q -p bessemer-bench --bin bench-core
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# Two runs that differ only in the step count: their difference is the steady state, free of
# start-up (pool creation, graph building).
for n in "$steps" $((steps * 2)); do
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.$n" \
    ./target/release/bench-core --only "$case_name" --steps "$n" --skip-sched >"$out/log.$n" 2>&1
done
python3 - "$out" "$steps" "$case_name" <<'PY'
import re, sys
sys.path.insert(0, "bench")
from callgrind_costs import costs
out, steps, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def per_fn(n):
    fns = costs(f"{out}/cg.{n}", "no")
    pkts = int(re.search(r"(\d+) packets", open(f"{out}/log.{n}").read()).group(1))
    return fns, pkts
a, pa = per_fn(steps)
b, pb = per_fn(steps * 2)
pkts = pb - pa
rows = sorted(((b.get(k, 0) - a.get(k, 0)) / pkts, k) for k in set(a) | set(b))
rows = [r for r in rows if r[0] > 0.005][::-1]
total = sum(r[0] for r in rows)
print(f"{name}: {total:.2f} instructions per packet ({pkts} packets in the steady state)")
for v, k in rows[:25]:
    print(f"  {v:7.2f}  {k[:110]}")
print('{"bench": "profile", "case": "%s", "instructions_per_packet": %.3f}' % (name, total))
PY
