#!/usr/bin/env bash
# make fuzz: runs every fuzz target under libFuzzer (cargo-fuzz, nightly toolchain) for
# FUZZ_SECS seconds each (default 60; FUZZ_TARGETS to pick some), growing fuzz/corpus/<target>/; prints executions per
# second and coverage per target, then one JSON line. A crash stops with the input saved in
# fuzz/artifacts/<target>/ (add it to the corpus with a fix: make test replays the corpus).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECS:-60}
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz: libFuzzer needs a nightly toolchain: rustup toolchain install nightly" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz (cargo install --locked cargo-fuzz)"
  cargo install --locked cargo-fuzz
fi
# FUZZ_TARGETS="a b" runs only those.
read -ra targets <<<"${FUZZ_TARGETS:-module_frames pcap_read module_args module_commands vnet_frames xdp_descriptors}"
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
cd fuzz
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t"
  echo "fuzz: $t for ${secs}s"
  cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -print_final_stats=1 \
    >"$logs/$t.log" 2>&1 || { tail -40 "$logs/$t.log"; echo "fuzz: $t failed" >&2; exit 1; }
done
python3 - "$logs" "$secs" "${targets[@]}" <<'PY'
import json, re, sys
logs, secs, targets = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
rows, out = [], {"bench": "fuzz", "seconds_per_target": secs}
for t in targets:
    text = open(f"{logs}/{t}.log", errors="replace").read()
    def stat(name):
        m = re.search(rf"stat::{name}:\s+(\d+)", text)
        return int(m.group(1)) if m else 0
    cov = re.findall(r"cov: (\d+)", text)
    corp = re.findall(r"corp: (\d+)", text)
    row = (t, stat("number_of_executed_units"), stat("average_exec_per_sec"),
           int(cov[-1]) if cov else 0, int(corp[-1]) if corp else 0)
    rows.append(row)
    out[f"{t}_execs_per_sec"] = row[2]
    out[f"{t}_coverage_edges"] = row[3]
print(f"{'target':<16} {'executions':>12} {'exec/s':>10} {'coverage':>10} {'corpus':>8}")
for r in rows:
    print(f"{r[0]:<16} {r[1]:>12} {r[2]:>10} {r[3]:>10} {r[4]:>8}")
print(json.dumps(out))
PY
