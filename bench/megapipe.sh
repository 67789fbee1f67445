#!/usr/bin/env bash
# MegaPipe benchmark: seed 002's RPC ping-pong (epoll vs the MegaPipe ablation, 1 and 2 cores,
# T transactions per connection, size sweep) and the macro runs (bessemer-kv vs memcached under
# memcaslap, bessemer-httpd vs nginx under wrk). Prints tables and ends with one JSON line.
# Usage: bench/megapipe.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
${CARGO:-cargo} build --release -q -p megapipe --bins
exec ./target/release/megapipe-bench all "$@"
