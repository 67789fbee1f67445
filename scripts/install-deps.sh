#!/usr/bin/env bash
# Installs what Bessemer needs to build and test on a Debian machine. Idempotent and
# non-interactive: it only installs what is missing.
set -euo pipefail

need_apt=()
have() { command -v "$1" >/dev/null 2>&1; }

have cc || need_apt+=(gcc)
have make || need_apt+=(make)
have python3 || need_apt+=(python3)
have pkg-config || need_apt+=(pkg-config)
# tcpdump reads what `bessemer tcpdump` captures (and its tests check that).
have tcpdump || [ -x /usr/bin/tcpdump ] || need_apt+=(tcpdump)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
# Port drivers and their tests make namespaces, veths and addresses with iproute2.
have ip || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || need_apt+=(iproute2)
# Port tests ping between the network namespaces they make.
have ping || [ -x /usr/bin/ping ] || [ -x /bin/ping ] || need_apt+=(iputils-ping)
# Port traffic tests send a file across the switch with iperf3.
have iperf3 || [ -x /usr/bin/iperf3 ] || need_apt+=(iperf3)
# Multi-queue tests give veth pairs two channels with ethtool -L.
have ethtool || [ -x /usr/sbin/ethtool ] || [ -x /sbin/ethtool ] || need_apt+=(ethtool)
# Observability tests: promtool checks /metrics and a real Prometheus scrapes it; the web
# view is loaded in headless Chromium.
have promtool || need_apt+=(prometheus)
have chromium || [ -x /usr/bin/chromium ] || need_apt+=(chromium)
# Security tests make a CA and certificates with openssl.
have openssl || need_apt+=(openssl)
# The BPF module compiles tcpdump expressions with libpcap (headers + libpcap.so to link).
[ -f /usr/include/pcap/pcap.h ] || need_apt+=(libpcap-dev)
# DPDK (PMDPort on NICs and DPDK virtual devices; the real bessd is built against it too).
pkg-config --exists libdpdk 2>/dev/null || need_apt+=(libdpdk-dev)
# The planner's tests cross-check its decision procedure with Z3 (the z3 crate binds libz3
# with bindgen, which needs libclang) and read NIC capabilities with ethtool.
[ -f /usr/include/z3.h ] || need_apt+=(libz3-dev)
ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || need_apt+=(libclang-dev)
have ethtool || [ -x /usr/sbin/ethtool ] || [ -x /sbin/ethtool ] || need_apt+=(ethtool)
# The planner's XDP offload program (crates/drivers/bpf/offload.bpf.c) is compiled with
# clang -target bpf by the drivers crate's build script; without clang the offload reports
# itself unavailable. It needs no kernel or libbpf headers, and Bessemer loads it itself.
have clang || need_apt+=(clang)
# MegaPipe server tests fetch files with curl.
have curl || need_apt+=(curl)
# Packaging and deployment (make deb, make image, make test-deploy): debhelper builds the
# Debian package, mmdebstrap the image's Debian root, setcap gives bessemerd its file
# capabilities there; podman with runc runs the image in the tests (crun refuses this
# machine's cgroup v1); systemd-analyze verifies the unit; man renders the man pages.
have dh || need_apt+=(debhelper)
have mmdebstrap || need_apt+=(mmdebstrap)
have setcap || [ -x /usr/sbin/setcap ] || [ -x /sbin/setcap ] || need_apt+=(libcap2-bin)
have podman || need_apt+=(podman)
have runc || [ -x /usr/sbin/runc ] || need_apt+=(runc)
have systemd-analyze || need_apt+=(systemd)
have man || need_apt+=(man-db)
# The control-plane tests build kube-apiserver, kubectl, etcd and helm from the Go module
# proxy (scripts/k8s-cache.sh): they need Go >= 1.26, which Debian 12 lacks; without it they
# are skipped with the reason.
# make bench-megapipe only (install-deps.sh --bench-megapipe): the peers and load generators.
if [ "${1:-}" = "--bench-megapipe" ]; then
  have memcached || [ -x /usr/bin/memcached ] || need_apt+=(memcached)
  have nginx || [ -x /usr/sbin/nginx ] || need_apt+=(nginx)
  have wrk || need_apt+=(wrk)
  have memcaslap || need_apt+=(libmemcached-tools)
fi

if ((${#need_apt[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing ${need_apt[*]}; run 'sudo apt-get install -y ${need_apt[*]}'" >&2
    exit 1
  fi
  echo "install-deps: installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need_apt[@]}"
fi

if ! have cargo; then
  if [ -x "$HOME/.cargo/bin/cargo" ]; then
    echo "install-deps: cargo is in ~/.cargo/bin; add it to PATH (source ~/.cargo/env)" >&2
  else
    echo "install-deps: Rust is missing. Install a stable toolchain (>= 1.91) with rustup" \
         "(https://rustup.rs) or 'apt-get install -y cargo rustc' on Debian 13 or later." >&2
  fi
  exit 1
fi

ver=$(rustc --version | awk '{print $2}')
major=${ver%%.*}; rest=${ver#*.}; minor=${rest%%.*}
if [ "$major" -lt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -lt 91 ]; }; then
  echo "install-deps: rustc $ver is too old; Bessemer needs 1.91 or later (rustup update stable)" >&2
  exit 1
fi
