#!/usr/bin/env bash
# Runs every Rust test. Tests that need root are built as ignored ("needs root: ...") when the
# build is not root's; running as root, none may be ignored that way (a stale build from
# another user would hide them), so that fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
log=$(mktemp)
trap 'rm -f "$log"' EXIT
${CARGO:-cargo} test --workspace 2>&1 | tee "$log"
if [ "$(id -u)" -eq 0 ] && grep -q "ignored, needs root" "$log"; then
  echo "test-rust: tests that need root were skipped although this runs as root;" \
       "rebuild them as root: cargo clean -p bessemer-drivers -p bessemer-daemon" >&2
  exit 1
fi
