#!/usr/bin/env bash
# Runs the UPF pipeline benchmark (bench/src/bench_upf.rs: conf/upf/upf.bess in sim mode on
# one core) in release; ends with one JSON line. As root it reserves 2 MiB hugepages for the
# packet pool (as bench/core.sh does) and gives back what it reserved afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p bessemer-bench --bin bench-upf
. bench/hugepages.sh
hugepages_reserve 64
trap hugepages_restore EXIT
./target/release/bench-upf "$@"
