#!/usr/bin/env bash
# make bench-slices: every part of issue 11's benchmark, one after the other, each printing
# its own table and JSON line, then ONE combined JSON line ("bench": "slices", dup2_scaling,
# slice_lib_mpps, afxdp_vs_pcap_mmap, esp_gcm_1400_gbps, and each part's own line):
#   scaling    bench/scaling.sh (make bench-scaling): duplicated / chained, 1 and 2 workers
#   slice-lib  bench-slice-lib (make bench-slice-lib): the slice library, both directions
#   netslice   bench/netslice.sh (make bench-netslice): AF_XDP slices vs pcap, pcap-mmap,
#              recvmmsg batches and the kernel; needs root (skipped with a message otherwise)
#   ipsec      bench-slices (bench/src/bench_slices.rs): ESPEncap / ESPDecap per core
# Options: --quick goes to every part; --runs N / --secs S go to the Rust parts.
# PARTS (default "scaling slice-lib netslice ipsec"): a space-separated subset.
set -euo pipefail
cd "$(dirname "$0")/.."
parts=${PARTS:-"scaling slice-lib netslice ipsec memif"}
quick=()
for a in "$@"; do [ "$a" = --quick ] && quick=(--quick); done
outdir=$(mktemp -d /tmp/bench-slices.XXXXXX)
cleanup() {
  hugepages_restore
  rm -rf "$outdir"
}
. bench/hugepages.sh
trap cleanup EXIT

# part NAME COMMAND...: runs a part, its output shown as it comes; its last line is kept.
part() {
  local name=$1
  shift
  echo "== bench-slices: $name ==" >&2
  if "$@" | tee "$outdir/$name.out"; then
    tail -n1 "$outdir/$name.out" > "$outdir/$name.json"
  else
    echo "{\"error\": \"$name failed (exit ${PIPESTATUS[0]}), see its output above\"}" > "$outdir/$name.json"
  fi
}

cargo build --release -p bessemer-bench --bin bench-slices --bin bench-slice-lib
for p in $parts; do
  case $p in
    scaling) part scaling bench/scaling.sh "$@" ;;
    slice-lib) part slice-lib ./target/release/bench-slice-lib "$@" ;;
    netslice)
      if [ "$(id -u)" -ne 0 ]; then
        echo "bench-slices: netslice skipped: needs root (namespaces, veth, XDP, AF_XDP)" >&2
        echo '{"skipped": "needs root"}' > "$outdir/netslice.json"
      else
        part netslice bench/netslice.sh "${quick[@]}"
      fi
      ;;
    ipsec)
      hugepages_reserve 64
      part ipsec ./target/release/bench-slices "$@"
      hugepages_restore
      hugepages_orig=""
      ;;
    # MemifPort against DPDK's net_memif (in bessd where it is built; never builds it here).
    memif) part memif env VS_BESS_DRIVER=bench/memif.py bench/vs_bess.sh --check-only "${quick[@]}" ;;
    *) echo "bench-slices: unknown part '$p'" >&2; exit 2 ;;
  esac
done

merge=$(cat <<'PY'
import json, os, sys
outdir, quick = sys.argv[1], sys.argv[2] == "1"
def load(name):
    try:
        with open(os.path.join(outdir, name + ".json")) as f:
            return json.loads(f.read())
    except FileNotFoundError:
        return {"skipped": "not run (PARTS)"}
    except json.JSONDecodeError:
        return {"error": "its last line is not JSON"}
parts = {n: load(n) for n in ("scaling", "slice-lib", "netslice", "ipsec", "memif")}
# The netslice part's per-forwarder rows stay in its own line; the figures come here.
parts["netslice"].pop("rows", None)
figs = {
    "dup2_scaling": parts["scaling"].get("dup2_scaling"),
    "slice_lib_mpps": parts["slice-lib"].get("slice_lib_mpps"),
    "afxdp_vs_pcap_mmap": parts["netslice"].get("afxdp_vs_pcap_mmap"),
    "esp_gcm_1400_gbps": parts["ipsec"].get("esp_gcm_1400_gbps"),
    "slice_two_core_mpps": parts["slice-lib"].get("slice_two_core_mpps"),
    "memif_vs_dpdk_memif": parts["memif"].get("memif_vs_dpdk_memif"),
}
targets = {"dup2_scaling": 1.8, "slice_lib_mpps": 20.0, "afxdp_vs_pcap_mmap": 4.0, "esp_gcm_1400_gbps": 10.0,
           "slice_two_core_mpps": 20.0, "memif_vs_dpdk_memif": 1.0}
met = {k: (figs[k] >= t if isinstance(figs[k], (int, float)) else None) for k, t in targets.items()}
# A factor from noisy runs is not judged (bench-scaling says which case spread).
if parts["scaling"].get("noisy"):
    met["dup2_scaling"] = None
print()
print(f"{'figure':22} {'value':>8} {'target':>7}  met")
for k, t in targets.items():
    v = figs[k]
    print(f"{k:22} {(f'{v:.2f}' if isinstance(v, (int, float)) else '-'):>8} {t:>7}  "
          f"{ {True: 'yes', False: 'no', None: '-'}[met[k]] }")
print(json.dumps({"bench": "slices", "quick": quick, **figs, "targets": targets, "met": met,
                  "parts": parts}))
PY
)
python3 -c "$merge" "$outdir" "$([ ${#quick[@]} -gt 0 ] && echo 1 || echo 0)"
