#!/usr/bin/env bash
# Seed 003 Table 5.1 on the planner's 82599 model (10 queues, balancing policy): full
# search, +1/+10/-1/-10 flows at 10/100/250/500 flows, basic and incremental flow maps,
# median [min..max] of several runs beside the thesis's figures. Ends with one JSON line.
# Arguments go to planner-bench (--runs N, --basic-runs N, --quick).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p bessemer-planner --bin planner-bench
exec nice target/release/planner-bench "$@"
