#!/usr/bin/env bash
# Builds the real omec bessd once, with the sample plugin (SequentialUpdate, loaded from
# core/modules/sequential_update.so) as omec's image has it (the UPF's sim mode needs it), into a cache outside the tree, for the benchmarks
# that compare Bessemer with BESS in the same run. Uses ../shared/tools/build-bess.sh (Debian's
# DPDK, pybess's stubs), with the plugin named in core/extra.mk before it builds (as BESS's
# build.py --plugin does), and adds the plugin's Python stubs to pybess/plugin_pb.
#
#   scripts/build-bessd.sh           build if needed; prints the bessd path as its last line
#   scripts/build-bessd.sh --check   exit 0 and print the path if built, 1 if not (no build)
#
# WORK is $BESSEMER_BESS_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/bessemer/bess. About 10
# minutes on an idle 2-core machine the first time; nothing after.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TOOL=${BESS_BUILD_TOOL:-$ROOT/../shared/tools/build-bess.sh}
SRC_TREE=${BESS_SRC:-$ROOT/../shared/third_party/omec-bess}
WORK=${BESSEMER_BESS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bessemer/bess}
MARK=$WORK/.bessd-with-sample-plugin

if [ "${1:-}" = "--check" ]; then
  if [ -f "$MARK" ] && [ -x "$WORK/bess/core/bessd" ]; then
    echo "$WORK/bess/core/bessd"
    exit 0
  fi
  exit 1
fi
if [ -f "$MARK" ] && [ -x "$WORK/bess/core/bessd" ]; then
  echo "$WORK/bess/core/bessd"
  exit 0
fi
[ -x "$TOOL" ] || { echo "build-bessd: $TOOL not found" >&2; exit 2; }
[ -d "$SRC_TREE/sample_plugin" ] || { echo "build-bessd: no BESS source at $SRC_TREE" >&2; exit 2; }
mkdir -p "$WORK"
# build-bess.sh copies the source only when $WORK/bess lacks its commit stamp; copy it here
# first (same stamp) so that core/extra.mk naming the plugin is there when it builds.
commit=$(sed -n 's/^COMMIT=\([0-9a-f]*\).*/\1/p' "$TOOL")
if [ ! -f "$WORK/bess/.bess-commit" ] || [ "$(cat "$WORK/bess/.bess-commit")" != "$commit" ]; then
  rm -rf "$WORK/bess"
  mkdir -p "$WORK/bess"
  cp -r "$SRC_TREE"/. "$WORK/bess"/
  chmod -R u+w "$WORK/bess"
  echo "$commit" >"$WORK/bess/.bess-commit"
fi
echo "PLUGINS += $WORK/bess/sample_plugin" >"$WORK/bess/core/extra.mk"
bessd=$("$TOOL" "$WORK" | tail -n 1)
[ -x "$bessd" ] || { echo "build-bessd: build-bess.sh made no bessd" >&2; exit 2; }
# The plugin's class is a shared object bessd loads from core/modules/ at start (`make
# modules`). BESS's Makefile links it against the static libraries bessd uses, which fails
# with Debian's libnuma.a (not position-independent); its symbols are all in bessd, which
# exports them (-rdynamic), so it is linked against nothing, as a plugin can be.
(
  cd "$WORK/bess/core"
  make -s VERSION="omec-${commit:0:12}" modules/sequential_update.o >/dev/null
  g++ -shared -rdynamic -o modules/sequential_update.so modules/sequential_update.o
)
# pybess's stubs for the plugin's messages (package sample.supdate.pb), as build.py makes them.
(
  cd "$WORK/bess"
  "$WORK/venv/bin/python" -m grpc_tools.protoc sample_plugin/protobuf/supdate_msg.proto \
    --proto_path=sample_plugin/protobuf --proto_path=protobuf \
    --python_out=pybess/plugin_pb --grpc_python_out=pybess/plugin_pb
)
touch "$MARK"
echo "$bessd"
