#!/usr/bin/env bash
# make fuzz: runs every fuzz target under libFuzzer (cargo-fuzz, nightly toolchain) for
# FUZZ_SECS seconds each (default 60; FUZZ_TARGETS="a b" to pick some), growing
# fuzz/corpus/<target>/ with what raises coverage, with the target's dictionary from
# fuzz/dict/ where one helps; prints per target the executions, executions per second,
# coverage (edges and features) and corpus size, then one JSON line. A crash or a hang
# (FUZZ_TIMEOUT seconds for one input, default 20) stops with the input saved in
# fuzz/artifacts/<target>/ (add it to the corpus with a fix: make test replays the corpus).
# FUZZ_CMIN=1 minimises each corpus afterwards (cargo fuzz cmin, counting edges without hit
# counts: the fewest inputs that reach every edge the corpus reaches), as the committed
# corpora are.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECS:-60}
timeout=${FUZZ_TIMEOUT:-20}
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz: libFuzzer needs a nightly toolchain: rustup toolchain install nightly" >&2
  exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz (cargo install --locked cargo-fuzz)"
  cargo install --locked cargo-fuzz
fi
all="module_frames pcap_read module_args module_commands vnet_frames xdp_descriptors
     module_graph module_tables slice_port port_rx http_endpoints megapipe_apps control_sequence"
read -ra targets <<<"$(echo ${FUZZ_TARGETS:-$all})"
# The dictionary of a target (libFuzzer's -dict), if it has one.
dict_of() {
  case "$1" in
    module_frames | module_graph | module_tables | vnet_frames) echo frames ;;
    pcap_read | port_rx) echo pcap ;;
    http_endpoints) echo http ;;
    megapipe_apps) echo megapipe_apps ;;
  esac
}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
cd fuzz
for t in "${targets[@]}"; do
  if [[ ! -f fuzz_targets/$t.rs ]]; then
    echo "fuzz: no target $t (fuzz/fuzz_targets/$t.rs)" >&2
    exit 1
  fi
  mkdir -p "corpus/$t"
  opts=(-max_total_time="$secs" -timeout="$timeout" -print_final_stats=1)
  # Inputs that are programs of many frames need room, but not more: a long input runs
  # slowly and bloats the committed corpus (the over-long requests the parsers refuse are
  # in the generator's seeds).
  case "$t" in
    module_graph) opts+=(-max_len=8192) ;;
    module_tables | megapipe_apps) opts+=(-max_len=4096) ;;
    http_endpoints) opts+=(-max_len=2048) ;;
  esac
  d=$(dict_of "$t")
  [[ -n $d ]] && opts+=(-dict="dict/$d.dict")
  echo "fuzz: $t for ${secs}s${d:+ (dictionary $d)}"
  cargo +nightly fuzz run "$t" "corpus/$t" -- "${opts[@]}" \
    >"$logs/$t.log" 2>&1 || { tail -60 "$logs/$t.log"; echo "fuzz: $t failed" >&2; exit 1; }
  if [[ ${FUZZ_CMIN:-0} == 1 ]]; then
    cargo +nightly fuzz cmin "$t" "corpus/$t" -- -timeout="$timeout" -use_counters=0 \
      >"$logs/$t.cmin.log" 2>&1 ||
      { tail -30 "$logs/$t.cmin.log"; echo "fuzz: cmin of $t failed" >&2; exit 1; }
  fi
  find "corpus/$t" -type f -printf "%s\n" | awk "{s+=\$1} END {print s+0}" >"$logs/$t.bytes"
  find "corpus/$t" -type f | wc -l >"$logs/$t.files"
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
    def last(field):
        v = re.findall(rf"\b{field}: (\d+)", text)
        return int(v[-1]) if v else 0
    files = int(open(f"{logs}/{t}.files").read())
    size = int(open(f"{logs}/{t}.bytes").read())
    row = dict(
        executions=stat("number_of_executed_units"),
        execs_per_sec=stat("average_exec_per_sec"),
        coverage_edges=last("cov"),
        features=last("ft"),
        corpus_files=files,
        corpus_kb=round(size / 1024),
        peak_rss_mb=stat("peak_rss_mb"),
    )
    rows.append((t, row))
    for k, v in row.items():
        out[f"{t}_{k}"] = v
print(f"{'target':<17} {'executions':>11} {'exec/s':>7} {'coverage':>9} {'features':>9} {'corpus':>7} {'KB':>6}")
for t, r in rows:
    print(f"{t:<17} {r['executions']:>11} {r['execs_per_sec']:>7} {r['coverage_edges']:>9} "
          f"{r['features']:>9} {r['corpus_files']:>7} {r['corpus_kb']:>6}")
print(json.dumps(out))
PY
