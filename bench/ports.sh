#!/usr/bin/env bash
# make bench-ports: 64-byte UDP frames (60 bytes + FCS) from a generator namespace, over a
# veth pair, through a switch, over a second veth pair, to a sink namespace that counts them
# (bench/src/bench_ports.rs). Switches: Bessemer with two AFXDPPorts (copy mode: veth has
# no zero-copy) and, as the in-kernel baseline, a Linux bridge with a static FDB entry. The
# generator is Bessemer itself (Source -> Rewrite -> AFXDPPort) in both runs. Needs root.
# Prints a table and one JSON line. SECONDS_PER_RUN (default 5) sets the measured time.
#
# Caveat: the generator, the switch and the kernel's veth/XDP work share the machine's
# cores (workers are not pinned), so the figures say how the two switches compare on this
# machine, not what either does on dedicated cores or real NICs.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "bench-ports: needs root (network namespaces, veth, XDP, AF_XDP)" >&2
  exit 1
fi
secs=${SECONDS_PER_RUN:-5}
cargo build --release -p bessemer-bench --bin bench-ports
bin=./target/release/bench-ports

t=bp$(( $$ % 100000 ))
gen=${t}gen sink=${t}sink
g0=${t}g0 g1=${t}g1 s0=${t}s0 s1=${t}s1 br=${t}br
cleanup() {
  ip link del "$g1" 2>/dev/null || true
  ip link del "$s1" 2>/dev/null || true
  ip link del "$br" 2>/dev/null || true
  ip netns del "$gen" 2>/dev/null || true
  ip netns del "$sink" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$gen"
ip netns add "$sink"
ip link add "$g1" type veth peer name "$g0"
ip link add "$s1" type veth peer name "$s0"
ip link set "$g0" netns "$gen"
ip link set "$s0" netns "$sink"
ip link set "$g1" up
ip link set "$s1" up
ip -n "$gen" link set "$g0" up
ip -n "$sink" link set "$s0" up
ip -n "$gen" link set lo up
ip -n "$sink" link set lo up

results=()
results+=("$($bin afxdp "$gen" "$g0" "$g1" "$s1" "$sink" "$s0" "$secs")")

ip link add "$br" type bridge
ip link set "$g1" master "$br"
ip link set "$s1" master "$br"
ip link set "$br" up
bridge fdb add 02:00:00:00:00:02 dev "$s1" master static
results+=("$($bin bridge "$gen" "$g0" "$g1" "$s1" "$sink" "$s0" "$secs")")

table=$(cat <<'PY'
import json, sys
rows = [json.loads(a) for a in sys.argv[1:]]
names = {"afxdp": "Bessemer, 2 x AFXDPPort (copy)", "bridge": "Linux bridge (kernel)"}
print(f"{'switch':34} {'offered Mpps':>12} {'at sink Mpps':>12} {'switch rx drops':>16}  bound by")
for r in rows:
    drops = str(r["switch_rx_dropped"]) if r["mode"] == "afxdp" else "-"
    bound = "generator" if r["sink_mpps"] >= 0.98 * r["offered_mpps"] else "switch"
    r["bound_by"] = bound
    print(f"{names[r['mode']]:34} {r['offered_mpps']:>12.3f} {r['sink_mpps']:>12.3f} {drops:>16}  {bound}")
print(json.dumps({"bench": "ports", "frame_bytes": rows[0]["frame_bytes"], "runs": rows}))
PY
)
python3 -c "$table" "${results[@]}"
