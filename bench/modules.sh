#!/usr/bin/env bash
# Runs the module-class benchmark (bench/src/bench_modules.rs) in release; ends with one JSON line.
# As root it reserves 2 MiB hugepages for the packet pool (as bench/core.sh does) and gives
# back what it reserved afterwards; without them the pool falls back to plain pages.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p bessemer-bench --bin bench-modules
nr=/proc/sys/vm/nr_hugepages
orig=""
if [ "$(id -u)" -eq 0 ] && [ -w "$nr" ]; then
  orig=$(cat "$nr")
  free=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
  if [ "$free" -lt 64 ]; then
    echo $((orig + 64 - free)) > "$nr" || true
  fi
fi
cleanup() {
  if [ -n "$orig" ]; then echo "$orig" > "$nr" || true; fi
}
trap cleanup EXIT
./target/release/bench-modules "$@"
