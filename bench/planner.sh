#!/usr/bin/env bash
# Seed 003 Table 5.1 on the planner's 82599 model (10 queues, balancing policy): full
# search, +1/+10/-1/-10 flows at 10/100/250/500 flows, basic and incremental flow maps,
# median [min..max] of several runs beside the thesis's figures. Arguments go to
# planner-bench (--runs N, --basic-runs N, --quick); --quick also shortens the offload case
# and the isolation experiment (planner-isolation --quick), the others are planner-bench's.
#
# Then, as root, the offload case on make bench-ports' topology (bench/ports.sh): 64-byte
# UDP frames through a pipeline that classifies (ExactMatch on 1000 5-tuples), rewrites
# (MACSwap) and forwards, run by Bessemer in user space (em-user) and with the planner's XDP
# offload on (em-offload), beside plain Bessemer forwarding (afxdp: no classification, the
# best Bessemer user space does) and the in-kernel XDP_REDIRECT bound (xdp). Each figure is
# the median of BENCH_REPS runs (default 5; 3 with --quick) of SECONDS_PER_RUN seconds
# (default 3; 2 with --quick), min-max printed. PLANNER_OFFLOAD=0 skips it.
#
# Then, as root, seed 003 §5.6.3's isolation experiment scaled to this machine on the veth
# testbed (planner-isolation: 2 queues, one per CPU, 2 HP + 8 BE UDP echo clients, the
# balancing policy against isolation; PLANNER_ISOLATION=0 skips it).
#
# Ends with one JSON line: the planner's keys plus offload_vs_best_userspace (em-offload's
# rate over the best of em-user and afxdp) and offload_vs_xdp_bound (over xdp), null when
# the offload case did not run (not root, no clang) with offload_error saying why; and the
# isolation keys (isolation_hp_p50_us, isolation_hp_p99_us, isolation_hp_tps,
# isolation_be_tps per policy, isolation_hp_p50_ratio, isolation_hp_tps_ratio), or
# isolation_error saying why they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p bessemer-planner --bin planner-bench --bin planner-isolation
out=$(nice target/release/planner-bench "$@")
printf '%s\n' "$out" | sed '$d'
json=$(printf '%s\n' "$out" | tail -n 1)

quick=0
for a in "$@"; do [ "$a" = --quick ] && quick=1; done
ports_json="null"
why=""
if [ "${PLANNER_OFFLOAD:-1}" != 1 ]; then
  why="skipped (PLANNER_OFFLOAD=0)"
elif [ "$(id -u)" -ne 0 ]; then
  why="needs root (network namespaces, veth, XDP, AF_XDP)"
elif ! command -v clang >/dev/null; then
  why="needs clang to build the XDP offload program (scripts/install-deps.sh)"
else
  echo
  echo "offload: classify (ExactMatch, 1000 flows) + MACSwap + forward, 64-byte frames (bench/ports.sh)"
  reps=${BENCH_REPS:-$([ $quick = 1 ] && echo 3 || echo 5)}
  secs=${SECONDS_PER_RUN:-$([ $quick = 1 ] && echo 2 || echo 3)}
  # Bessemer's workers nap when idle (--idle-sleep-max-us): with the offload on, the kernel
  # does the work and the worker has nothing to poll. Under load a worker never naps.
  if ports=$(MODES="afxdp em-user em-offload xdp" BENCH_FRAME_BYTES=64 BENCH_REPS=$reps \
    SECONDS_PER_RUN=$secs BENCH_IDLE_SLEEP_US=${BENCH_IDLE_SLEEP_US:-1000} bench/ports.sh); then
    printf '%s\n' "$ports" | sed '$d'
    ports_json=$(printf '%s\n' "$ports" | tail -n 1)
  else
    why="bench/ports.sh failed (see its messages above)"
  fi
fi

iso_json="null"
iso_why=""
if [ "${PLANNER_ISOLATION:-1}" != 1 ]; then
  iso_why="skipped (PLANNER_ISOLATION=0)"
elif [ "$(id -u)" -ne 0 ]; then
  iso_why="needs root (network namespaces, veth, BPF)"
else
  echo
  iso_args=()
  [ $quick = 1 ] && iso_args=(--quick)
  if iso=$(target/release/planner-isolation ${iso_args[@]+"${iso_args[@]}"} 2>&1); then
    printf '%s\n' "$iso" | sed '$d'
    iso_json=$(printf '%s\n' "$iso" | tail -n 1)
  else
    printf '%s\n' "$iso"
    iso_why=$(printf '%s\n' "$iso" | tail -n 1)
  fi
fi

python3 - "$json" "$ports_json" "$why" "$iso_json" "$iso_why" <<'PY'
import json, sys
out = json.loads(sys.argv[1])
ports = json.loads(sys.argv[2])
why = sys.argv[3]
iso = json.loads(sys.argv[4])
if iso is not None:
    out.update({k: v for k, v in iso.items() if k != "bench"})
else:
    out["isolation_error"] = sys.argv[5] or "the isolation experiment produced no figures"
def run64(mode):
    for r in (ports or {}).get("switches", []):
        if r.get("mode") == mode:
            for x in r.get("runs", []):
                if x["frame_bytes"] == 64:
                    return x
    return None
off, user, plain, bound = (run64(m) for m in ("em-offload", "em-user", "afxdp", "xdp"))
if ports is not None and off and bound and (user or plain):
    best = max((r for r in (user, plain) if r), key=lambda r: r["sink_mpps"])
    out["offload_vs_best_userspace"] = round(off["sink_mpps"] / best["sink_mpps"], 3)
    out["offload_vs_xdp_bound"] = round(off["sink_mpps"] / bound["sink_mpps"], 3)
    out["offload_mpps"] = off["sink_mpps"]
    out["offload_mpps_min_max"] = [off["sink_mpps_min"], off["sink_mpps_max"]]
    out["offload_cpu_pct"] = off["cpu_switch_pct"]
    out["offload_cpu_vs_best_userspace"] = round(off["cpu_switch_pct"] / best["cpu_switch_pct"], 3)
    out["userspace_classify_mpps"] = user["sink_mpps"] if user else None
    out["userspace_classify_cpu_pct"] = user["cpu_switch_pct"] if user else None
    out["userspace_forward_mpps"] = plain["sink_mpps"] if plain else None
    out["xdp_bound_mpps"] = bound["sink_mpps"]
    print()
    print(f"offload: {off['sink_mpps']:.3f} Mpps [{off['sink_mpps_min']:.3f}..{off['sink_mpps_max']:.3f}] "
          f"at {off['cpu_switch_pct']:.0f}% CPU; "
          f"{out['offload_vs_best_userspace']:.2f}x the best user space "
          f"({best['sink_mpps']:.3f} Mpps, target >= 1.5x), "
          f"{100 * out['offload_vs_xdp_bound']:.0f}% of the XDP_REDIRECT bound "
          f"({bound['sink_mpps']:.3f} Mpps, target >= 70%), "
          f"CPU {out['offload_cpu_vs_best_userspace']:.2f}x the best user space's "
          f"({best['cpu_switch_pct']:.0f}%, target: no more)")
else:
    out["offload_error"] = why or "the offload case produced no figures (see above)"
    print(f"\noffload: not measured: {out['offload_error']}")
print(json.dumps(out))
PY
