#!/usr/bin/env bash
# Runs the module-class benchmark (bench/src/bench_modules/) in release; ends with one JSON line.
# As root it reserves 2 MiB hugepages for the packet pool (as bench/core.sh does) and gives
# back what it reserved afterwards; without them the pool falls back to plain pages.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p bessemer-bench --bin bench-modules
. bench/hugepages.sh
hugepages_reserve 64
trap hugepages_restore EXIT
./target/release/bench-modules "$@"
