#!/usr/bin/env bash
# Multi-core scaling in memory (duplicated and chained, one and two workers, 60 and 1500 B):
# a table and one JSON line. As root it reserves 2 MiB hugepages for the run and gives back
# what it reserved afterwards. Options go to bench-scaling (--runs N --secs S --quick).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p bessemer-bench --bin bench-scaling
. bench/hugepages.sh
hugepages_reserve 64
trap hugepages_restore EXIT
./target/release/bench-scaling "$@"
