#!/usr/bin/env bash
# Runs the slices benchmark (bench/src/bench_slices.rs; today its IPsec part) in release;
# ends with one JSON line. As root it reserves 2 MiB hugepages for the packet pools (as
# bench/core.sh does) and gives back what it reserved afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p bessemer-bench --bin bench-slices
. bench/hugepages.sh
hugepages_reserve 64
trap hugepages_restore EXIT
./target/release/bench-slices "$@"
