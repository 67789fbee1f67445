#!/usr/bin/env bash
# Instructions per packet of one bench-modules case, counted by callgrind (exact and repeatable
# whatever else the machine does). Usage: bench/profile_modules.sh CASE [STEPS] [BINARY]
#   CASE: a substring of the case name as for --only (e.g. "BPF 10 " or "WildcardMatch 100 ")
#   STEPS: scheduler rounds per pipeline (default 20000); BINARY: a bench-modules binary to
#   profile instead of building this tree's (e.g. an older build to compare with).
# As bench/profile.sh: two runs that differ only in the step count, whose difference is the
# steady state (no set-up, no table building). The class's cost is the pipeline with it minus
# the pipeline without it (the costs of the calls to steps_class and steps_base), and the functions
# listed are the largest exclusive costs of both pipelines together.
set -euo pipefail
cd "$(dirname "$0")/.."
case_name=${1:?usage: bench/profile_modules.sh CASE [STEPS] [BINARY]}
steps=${2:-20000}
bin=${3:-}
if ! command -v valgrind >/dev/null || ! command -v callgrind_annotate >/dev/null; then
  echo "profile_modules: valgrind is missing; install it with 'apt-get install -y valgrind'" >&2
  exit 1
fi
if [ -z "$bin" ]; then
  cargo build --release -q -p bessemer-bench --bin bench-modules
  bin=./target/release/bench-modules
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for n in "$steps" $((steps * 2)); do
  valgrind --tool=callgrind --callgrind-out-file="$out/cg.$n" \
    "$bin" --only "$case_name" --steps "$n" >"$out/log.$n" 2>&1
done
python3 - "$out" "$steps" "$case_name" <<'PY'
import re, sys
sys.path.insert(0, "bench")
from callgrind_costs import call_costs, costs as cg_costs
out, steps, name = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def costs(n, inclusive):
    return cg_costs(f"{out}/cg.{n}", inclusive)
def packets(n):
    log = open(f"{out}/log.{n}").read()
    m = re.findall(r"^(.*): base (\d+) packets, class (\d+) packets", log, re.M)
    if len(m) != 1:
        sys.exit(f"profile_modules: '{name}' must select exactly one case; log:\n{log}")
    return m[0][0], int(m[0][1]), int(m[0][2])
def calls(n, f):
    return call_costs(f"{out}/cg.{n}", f)
case, ba, ca = packets(steps)
_, bb, cb = packets(steps * 2)
base = (calls(steps * 2, "steps_base") - calls(steps, "steps_base")) / (bb - ba)
full = (calls(steps * 2, "steps_class") - calls(steps, "steps_class")) / (cb - ca)
ea, eb = costs(steps, "no"), costs(steps * 2, "no")
rows = sorted(((eb.get(k, 0) - ea.get(k, 0)) / (cb - ca), k) for k in set(ea) | set(eb))
rows = [r for r in rows if r[0] > 0.05][::-1]
print(f"{case}: class {full - base:.2f} instructions per packet "
      f"(pipeline {full:.2f}, without the class {base:.2f}; {cb - ca} packets in the steady state)")
print("  largest exclusive costs, both pipelines, per packet of the class pipeline:")
for v, k in rows[:20]:
    print(f"  {v:7.2f}  {k[:110]}")
print('{"bench": "profile_modules", "case": "%s", "class_instructions_per_packet": %.3f}' % (case, full - base))
PY
