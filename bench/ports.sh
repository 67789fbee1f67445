#!/usr/bin/env bash
# make bench-ports: UDP frames from a generator namespace —veth— switch —veth— sink namespace,
# the same topology and generator for every switch (bench/src/bench_ports.rs does one switch
# per call: live-frames XDP generator pinned to core 0, switch on core 1, XDP counter at the
# sink, 64- and 1518-byte frames, CPU, ping round trips). Switches, in this order:
#   afxdp      Bessemer, 2 x AFXDPPort (copy mode: veth has no zero-copy), worker on core 1
#   em-user    (make bench-planner) Bessemer, ExactMatch on 1000 5-tuples -> MACSwap -> PortOut, AFXDPPorts
#   em-offload (make bench-planner) the same pipeline with the planner's XDP offload on
#   afpacket   Bessemer, 2 x AFPacketPort, worker on core 1
#   xdp        in-kernel XDP_REDIRECT between the two switch-side veths (the upper bound)
#   bridge     Linux bridge, static FDB entry for the generated frames
#   ovs-afxdp  Open vSwitch userspace datapath (netdev), type=afxdp ports, PMD on core 1
#   ovs-netdev Open vSwitch userspace datapath, plain (AF_PACKET) ports, pinned to core 1
#   testpmd    DPDK testpmd io mode with net_af_xdp: only if a dpdk-testpmd binary exists
# and, for NetSlice's comparison (bench/netslice.sh; not in the default list):
#   pcap       standalone forwarder, AF_PACKET, one recv + one send per frame
#   pcap-mmap  standalone forwarder, TPACKET_V2 RX ring + TX ring
#   mmsg:B     standalone forwarder, recvmmsg/sendmmsg batches of B
#   kernel     the Linux bridge again, under the name of the paper's kernel baseline
#   direct     no switch: ping round trips over a veth pair straight between the namespaces
# A mode may end in @0 or @1: the core the switch/forwarder runs on (default 1; 0 shares the
# generator's core). BENCH_FRAME_BYTES (e.g. 64): measure only these frame sizes.
# First, always, the generator alone ("generator" row): a veth pair straight from the generator
# namespace into the sink's, the generator's own maximum rate. That call also picks the
# generator for every switch: live-frames XDP where the kernel allows it, otherwise (the reason
# is printed once) an AF_PACKET TX ring with PACKET_QDISC_BYPASS on the same core and the same
# frames. A switch's figure at 90 % or more of the generator's own is marked as bounded by the
# generator ("gen" in the table's bound column), not by the switch.
# Needs root. Prints a table and one JSON line.
#   SECONDS_PER_RUN (default 5): measured seconds per run
#   BENCH_REPS (default 3): runs per switch and frame size; the median is shown (about 5 min)
#   MODES (default: all of the above): a space-separated subset
#   BENCH_GEN (default auto): xdp-live or afpacket, to use that generator (no trial)
#   BENCH_SINK=stats (diagnostic): count with the sink's rx_packets and no XDP program there
#     (spares the switch's core the copy veth makes to give an skb to XDP; not for xdp)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "bench-ports: needs root (network namespaces, veth, XDP, AF_XDP)" >&2
  exit 1
fi
secs=${SECONDS_PER_RUN:-5}
modes=${MODES:-"afxdp afpacket xdp bridge ovs-afxdp ovs-netdev testpmd"}

# Packages the benchmark uses (installed only when missing).
need=()
for p in iproute2 iputils-ping procps python3 openvswitch-switch; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "bench-ports: installing ${need[*]}" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") >&2 ||
    echo "bench-ports: could not install ${need[*]}; the switches that need them are skipped" >&2
fi

cargo build --release -p bessemer-bench --bin bench-ports
bin=./target/release/bench-ports

t=bp$(( $$ % 100000 ))
gen=${t}gen sink=${t}sink
g0=${t}g0 g1=${t}g1 s0=${t}s0 s1=${t}s1 br=${t}br
ovsdir=""
stop_ovs() {
  [ -n "$ovsdir" ] || return 0
  for d in ovs-vswitchd ovsdb-server; do
    if [ -f "$ovsdir/$d.pid" ]; then
      pid=$(cat "$ovsdir/$d.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  rm -rf "$ovsdir"
  ovsdir=""
}
cleanup() {
  stop_ovs
  ip link del "$g1" 2>/dev/null || true
  ip link del "$s1" 2>/dev/null || true
  ip link del "$br" 2>/dev/null || true
  ip netns del "$gen" 2>/dev/null || true
  ip netns del "$sink" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "bench-ports: load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
ip netns add "$gen"
ip netns add "$sink"
ip link add "$g1" type veth peer name "$g0"
ip link add "$s1" type veth peer name "$s0"
ip link set "$g0" netns "$gen"
ip link set "$s0" netns "$sink"
for l in "$g1" "$s1"; do
  sysctl -qw "net.ipv6.conf.$l.disable_ipv6=1"
  ip link set "$l" up
done
ip netns exec "$gen" sysctl -qw "net.ipv6.conf.$g0.disable_ipv6=1"
ip netns exec "$sink" sysctl -qw "net.ipv6.conf.$s0.disable_ipv6=1"
ip -n "$gen" addr add 10.99.0.1/24 dev "$g0"
ip -n "$sink" addr add 10.99.0.2/24 dev "$s0"
ip -n "$gen" link set "$g0" up
ip -n "$sink" link set "$s0" up
ip -n "$gen" link set lo up
ip -n "$sink" link set lo up

# The generator alone, into the sink's XDP counter over a veth pair of its own.
gen_row='{"mode":"generator","error":"bench-ports failed, see stderr"}'
echo "bench-ports: generator alone" >&2
ip -n "$gen" link add "${t}d0" type veth peer name "${t}d1" netns "$sink"
ip netns exec "$gen" sysctl -qw "net.ipv6.conf.${t}d0.disable_ipv6=1"
ip netns exec "$sink" sysctl -qw "net.ipv6.conf.${t}d1.disable_ipv6=1"
ip -n "$gen" link set "${t}d0" up
ip -n "$sink" link set "${t}d1" up
if out=$(timeout 300 "$bin" generator "$gen" "${t}d0" - - "$sink" "${t}d1" "$secs"); then
  gen_row=$out
  # Every switch's call uses the generator picked here (and does not print why again).
  BENCH_GEN=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["generator"])' "$out")
  export BENCH_GEN
fi
ip -n "$gen" link del "${t}d0"

results=()
one() { # mode [switch_pid]
  local out
  if out=$(timeout 300 "$bin" "$1" "$gen" "$g0" "$g1" "$s1" "$sink" "$s0" "$secs" "${2:-0}"); then
    results+=("$out")
  else
    results+=("{\"mode\":\"$1\",\"error\":\"bench-ports failed (exit $?), see stderr\"}")
  fi
}
skip() { results+=("{\"mode\":\"$1\",\"error\":\"$2\"}"); }

start_ovs() {
  ovsdir=$(mktemp -d /tmp/bench-ovs.XXXXXX)
  export OVS_RUNDIR=$ovsdir OVS_LOGDIR=$ovsdir OVS_DBDIR=$ovsdir OVS_SYSCONFDIR=$ovsdir
  ovsdb-tool create "$ovsdir/conf.db" /usr/share/openvswitch/vswitch.ovsschema
  ovsdb-server "$ovsdir/conf.db" --remote="punix:$ovsdir/db.sock" \
    --pidfile="$ovsdir/ovsdb-server.pid" --log-file="$ovsdir/ovsdb-server.log" --detach
  ovs-vsctl --timeout=10 --no-wait init
  ovs-vsctl --timeout=10 --no-wait set Open_vSwitch . other_config:pmd-cpu-mask=0x2
  taskset -c 1 ovs-vswitchd "unix:$ovsdir/db.sock" --pidfile="$ovsdir/ovs-vswitchd.pid" \
    --log-file="$ovsdir/ovs-vswitchd.log" --detach
  ovs-vsctl --timeout=10 add-br br0 -- set bridge br0 datapath_type=netdev
}
ovs_ports() { # type ("" for plain netdev ports)
  local a=() b=()
  if [ -n "$1" ]; then
    a=(-- set interface "$g1" "type=$1")
    b=(-- set interface "$s1" "type=$1")
  fi
  ovs-vsctl --timeout=20 add-port br0 "$g1" "${a[@]}" -- add-port br0 "$s1" "${b[@]}"
  ovs-ofctl del-flows br0
  ovs-ofctl add-flow br0 "in_port=$g1,actions=output:$s1"
  ovs-ofctl add-flow br0 "in_port=$s1,actions=output:$g1"
  sleep 1
}
ovs_unports() {
  ovs-vsctl --timeout=20 del-port br0 "$g1" -- del-port br0 "$s1"
  ip link set "$g1" up
  ip link set "$s1" up
}

for m in $modes; do
  echo "bench-ports: $m" >&2
  case $m in
    afxdp | afxdp@* | afxdp:* | em-user | em-user@* | em-offload | em-offload@* | afpacket | afpacket@* | xdp | pcap | pcap@* | pcap-mmap | pcap-mmap@* | mmsg*)
      one "$m" ;;
    direct)
      ip -n "$gen" link add "${t}d0" type veth peer name "${t}d1" netns "$sink"
      ip -n "$gen" addr add 10.98.0.1/24 dev "${t}d0"
      ip -n "$sink" addr add 10.98.0.2/24 dev "${t}d1"
      ip -n "$gen" link set "${t}d0" up
      ip -n "$sink" link set "${t}d1" up
      one direct
      ip -n "$gen" link del "${t}d0"
      ;;
    bridge | kernel)
      ip link add "$br" type bridge
      ip link set "$g1" master "$br"
      ip link set "$s1" master "$br"
      ip link set "$br" up
      bridge fdb add 02:00:00:00:00:02 dev "$s1" master static
      one "$m"
      ip link del "$br"
      ;;
    ovs-afxdp | ovs-netdev)
      if ! command -v ovs-vswitchd >/dev/null; then
        skip "$m" "openvswitch-switch not installed"
        continue
      fi
      [ -n "$ovsdir" ] || start_ovs
      if [ "$m" = ovs-afxdp ]; then ovs_ports afxdp; else ovs_ports ""; fi
      one "$m" "$(cat "$ovsdir/ovs-vswitchd.pid")"
      ovs_unports
      ;;
    testpmd)
      if command -v dpdk-testpmd >/dev/null; then
        skip testpmd "dpdk-testpmd exists but this benchmark does not drive it yet"
      else
        skip testpmd "not available (Debian 12's dpdk has no testpmd)"
      fi
      ;;
    *) skip "$m" "unknown switch" ;;
  esac
done
stop_ovs

table=$(cat <<'PY'
import json, sys
secs = sys.argv[1]
gen = json.loads(sys.argv[2])
rows = [json.loads(a) for a in sys.argv[3:]]
gen_names = {"xdp-live": "live-frames XDP", "afpacket": "AF_PACKET TX ring, qdisc bypass"}
names = {
    "afxdp": "Bessemer, 2 x AFXDPPort (copy)",
    "em-user": "Bessemer classify+rewrite, user",
    "em-offload": "Bessemer classify+rewrite, XDP",
    "afpacket": "Bessemer, 2 x AFPacketPort",
    "xdp": "XDP_REDIRECT in kernel (bound)",
    "bridge": "Linux bridge",
    "ovs-afxdp": "OVS userspace, afxdp ports",
    "ovs-netdev": "OVS userspace, netdev ports",
    "testpmd": "DPDK testpmd io, net_af_xdp",
    "kernel": "Linux bridge (kernel baseline)",
    "pcap": "AF_PACKET recv/send per frame",
    "pcap-mmap": "AF_PACKET TPACKET_V2 rings",
    "direct": "no switch: direct veth",
}
def name_of(m):
    base, _, core = m.partition("@")
    kind, _, batch = base.partition(":")
    n = names.get(kind, "recvmmsg/sendmmsg" if kind == "mmsg" else kind)
    if batch:
        n += f", {'burst' if kind == 'afxdp' else 'batch'} {batch}"
    if core == "0":
        n += ", core 0"
    return n
def run(r, size):
    for x in r.get("runs", []):
        if x["frame_bytes"] == size:
            return x
    return None
base = next((r for r in rows if r["mode"] == "afxdp" and "runs" in r), None)
b64 = run(base, 64)["sink_mpps"] if base else None
# A figure at this share of the generator's own rate (at that frame size) or above is bounded
# by the generator, not the switch.
GEN_BOUND = 0.9
def bound(a, size):
    g = run(gen, size)
    if a is None or g is None or not g["sink_mpps"]:
        return "-"
    return "gen" if a["sink_mpps"] >= GEN_BOUND * g["sink_mpps"] else "sw"
hdr = (f"{'switch':32} {'64B Mpps':>8} {'(min-max)':>11} {'Gbps':>6} {'CPU%':>5} {'1518B Mpps':>10} {'Gbps':>6} "
       f"{'CPU%':>5} {'x afxdp':>7} {'RTT p50':>8} {'p99 us':>7} {'bound':>7}")
print(hdr)
print("-" * len(hdr))
if "error" in gen:
    print(f"{'generator alone -> sink':32} {gen['error']}")
else:
    # Its CPU is the generator's own core, not a switch's: not shown.
    a, b = run(gen, 64), run(gen, 1518)
    rng = f"{a['sink_mpps_min']:.2f}-{a['sink_mpps_max']:.2f}" if a else ""
    small = (f"{a['sink_mpps']:>8.3f} {rng:>11} {a['sink_gbps']:>6.2f}" if a
             else f"{'-':>8} {'':>11} {'-':>6}")
    big = f"{b['sink_mpps']:>10.3f} {b['sink_gbps']:>6.2f}" if b else f"{'-':>10} {'-':>6}"
    flag = " *" if (a and a["disturbed"]) or (b and b["disturbed"]) else ""
    print(f"{'generator alone -> sink':32} {small} {'-':>5} {big} {'-':>5} {'-':>7} {'-':>8} {'-':>7}{flag}")
for r in rows:
    name = name_of(r["mode"])
    if "error" in r:
        print(f"{name:32} {r['mode']}: {r['error']}")
        continue
    a, b = run(r, 64), run(r, 1518)
    if a is None:
        lat = f"{r['rtt_p50_us']:>8.0f} {r['rtt_p99_us']:>7.0f}" if r.get("pings") else "-"
        print(f"{name:32} {'-':>8} {'':>11} {'':>6} {'':>5} {'':>10} {'':>6} {'':>5} {'':>7} {lat}")
        continue
    ratio = a["sink_mpps"] / b64 if b64 else None
    r["ratio_to_afxdp_64"] = round(ratio, 3) if ratio is not None else None
    lat = (f"{r['rtt_p50_us']:>8.0f} {r['rtt_p99_us']:>7.0f}" if r["pings"] else f"{'-':>8} {'-':>7}")
    flag = " *" if a["disturbed"] or (b and b["disturbed"]) else ""
    rng = f"{a['sink_mpps_min']:.2f}-{a['sink_mpps_max']:.2f}"
    big = (f"{b['sink_mpps']:>10.3f} {b['sink_gbps']:>6.2f} {b['cpu_switch_pct']:>5.0f}" if b
           else f"{'-':>10} {'-':>6} {'-':>5}")
    bnd = f"{bound(a, 64)}/{bound(b, 1518)}"
    print(f"{name:32} {a['sink_mpps']:>8.3f} {rng:>11} {a['sink_gbps']:>6.2f} {a['cpu_switch_pct']:>5.0f} "
          f"{big} "
          f"{(f'{ratio:.2f}' if ratio is not None else '-'):>7} {lat} {bnd:>7}{flag}")
kinds = sorted({r["generator"] for r in [gen] + rows if "generator" in r})
gname = ", ".join(gen_names.get(k, k) for k in kinds) or "none ran"
print(f"generator: {gname}, core 0"
      + (f", because {gen['generator_reason']}" if gen.get("generator_reason") else ""))
if "runs" in gen:
    own = ", ".join(f"{x['sink_mpps']:.2f} Mpps at {x['frame_bytes']} B" for x in gen["runs"])
    print(f"generator alone into the sink: {own}; bound: gen = a figure at {GEN_BOUND:.0%} of that "
          f"or more (the generator bounds it), sw = below (the switch does), for 64/1518 B")
gens = [x["offered_mpps"] for r in rows for x in r.get("runs", []) if x["frame_bytes"] == 64]
gens_l = [x["offered_mpps"] for r in rows for x in r.get("runs", []) if x["frame_bytes"] == 1518]
if gens:
    big = f", {min(gens_l):.2f}-{max(gens_l):.2f} Mpps at 1518 B" if gens_l else ""
    print(f"generator offered {min(gens):.2f}-{max(gens):.2f} Mpps at 64 B{big} "
          f"through the switches; {secs} s per run")
sinks = sorted({r["sink"] for r in rows if r.get("sink")})
print("sink counter: " + ", ".join("XDP per-CPU counter" if k == "xdp" else
      "rx_packets, no XDP (BENCH_SINK=stats)" if k == "rx_packets" else k for k in sinks))
print("each figure: the median of the runs (by the sink's rate); min-max: the runs' 64-byte rates")
print("CPU% = all of core 1 (the switch's) + softirq on core 0 (veth receive of the switch side), "
      "in % of one core; "
      "* = a run disturbed by other load")
print(json.dumps({"bench": "ports", "seconds_per_run": float(secs),
                  "generator": {"kind": gen.get("generator"), "reason": gen.get("generator_reason"),
                                "alone": gen},
                  "switches": rows}))
PY
)
python3 -c "$table" "$secs" "$gen_row" "${results[@]}"
