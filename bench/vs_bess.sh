#!/usr/bin/env bash
# make bench-vs-bess: the real omec bessd against bessemerd, daemon to daemon, one pipeline per
# row (bench/vs_bess.py). Builds bessd once if needed (scripts/build-bessd.sh, cached outside
# the tree) and bessemerd (release), then runs the driver as root with BESS's own pybess and
# venv. Where bessd cannot be built or run here it says why, prints a JSON line with
# "bess_measured": false and exits 0.
#
#   bench/vs_bess.sh [driver options]     e.g. --quick, --rows 'ip_lookup*', --core-only
#   bench/vs_bess.sh --check-only ...     never builds bessd: measures only if it is cached
#                                         (what bench/core.sh uses)
#   BESS_ONLY=1 bench/vs_bess.sh ...      BESS alone (no bessemerd build)
set -euo pipefail
cd "$(dirname "$0")/.."

# VS_BESS_DRIVER runs another driver with the same set-up (make bench-pmd: bench/pmd.py).
driver=${VS_BESS_DRIVER:-bench/vs_bess.py}
bench=$(basename "$driver" .py)

not_measured() {
  echo "BESS not measured: $*"
  echo "{\"bench\": \"$bench\", \"bess_measured\": false}"
  exit 0
}

check_only=0
if [ "${1:-}" = "--check-only" ]; then
  check_only=1
  shift
fi

# scripts/build-bessd.sh finds ../shared/tools/build-bess.sh from the checkout; a worktree
# under wt/ has it two levels up.
if [ -z "${BESS_BUILD_TOOL:-}" ] && [ ! -x ../shared/tools/build-bess.sh ] \
  && [ -x ../../shared/tools/build-bess.sh ]; then
  BESS_BUILD_TOOL=$(cd ../../shared/tools && pwd)/build-bess.sh
  BESS_SRC=${BESS_SRC:-$(cd ../../shared/third_party/omec-bess 2>/dev/null && pwd || true)}
  export BESS_BUILD_TOOL BESS_SRC
fi

if ! bessd=$(scripts/build-bessd.sh --check 2>/dev/null); then
  [ "$check_only" = 1 ] && not_measured "bessd is not built (make bench-vs-bess builds it once)"
  echo "# building the real bessd once (scripts/build-bessd.sh; ~10 minutes on an idle machine)"
  if ! out=$(scripts/build-bessd.sh 2>&1); then
    printf '%s\n' "$out" | tail -n 20 >&2
    not_measured "bessd cannot be built here (scripts/build-bessd.sh failed; its last lines above)"
  fi
  bessd=$(printf '%s\n' "$out" | tail -n 1)
fi
[ -x "$bessd" ] || not_measured "no bessd at '$bessd'"
[ "$(id -u)" = 0 ] || not_measured "bessd (DPDK) needs root; run as root"
cache=$(cd "$(dirname "$bessd")/../.." && pwd)
py=$cache/venv/bin/python
[ -x "$py" ] || not_measured "no pybess venv at $cache/venv"

args=(--bessd "$bessd" --pybess "$cache/bess")
if [ "${BESS_ONLY:-0}" = 1 ]; then
  args+=(--daemons bess)
else
  cargo build --release -q -p bessemer-daemon
  args+=(--bessemerd target/release/bessemerd)
fi
exec "$py" -u "$driver" "${args[@]}" "$@"
