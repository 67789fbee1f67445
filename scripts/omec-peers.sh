#!/usr/bin/env bash
# Builds the real omec-project peers Bessemer is tested against, from the unmodified sources in
# ../shared/third_party (read-only where CI runs), into a cache outside the source tree:
#
#   $CACHE/bin/{pfcpiface,pfcpsim,pfcpctl}   the UPF's agent and the PFCP client (Go)
#   $CACHE/bess/{bessctl,pybess}              omec's bessctl and pybess, with pybess's stubs
#                                             (builtin_pb, and plugin_pb for the sample plugin's
#                                             package sample.supdate.pb, as omec's image has)
#                                             and omec-upf's conf/ copied into bessctl/conf
#                                             (as omec's Dockerfile does)
#   $CACHE/venv                               Python for them (grpcio, protobuf, scapy, pyroute2...)
#
# CACHE is $BESSEMER_OMEC_CACHE, default ${XDG_CACHE_HOME:-~/.cache}/bessemer/omec. Every step
# is skipped when its output is there and was made from the same sources (a stamp holds the
# third-party commits); re-running is cheap. Prints `CACHE=<dir>` as its last line.
#
#   scripts/omec-peers.sh [--check]   --check: exit 0 if everything is built, 1 if not (no build)
#
# Needs: Go >= 1.25 (if `go` is missing or older, the toolchain is fetched from the Go module
# proxy into the cache), python3 with venv, network access to the Go module proxy and PyPI the
# first time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TP=${BESSEMER_THIRD_PARTY:-$ROOT/../shared/third_party}
CACHE=${BESSEMER_OMEC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/bessemer/omec}
GO_VERSION=1.25.5

log() { printf 'omec-peers: %s\n' "$*" >&2; }
die() { printf 'omec-peers: %s\n' "$*" >&2; exit 2; }

[ -d "$TP/omec-upf" ] && [ -d "$TP/omec-bess" ] && [ -d "$TP/omec-pfcpsim" ] \
  || die "the omec sources are not at $TP (set BESSEMER_THIRD_PARTY)"
# The stamp: the commits of the three snapshots (their README's table) and this script.
stamp=$( { grep -E '^\| `omec-' "$TP/README.md"; cat "$0"; } | sha256sum | cut -c1-16)

built() {
  [ -f "$CACHE/.stamp" ] && [ "$(cat "$CACHE/.stamp")" = "$stamp" ] \
    && [ -x "$CACHE/bin/pfcpiface" ] && [ -x "$CACHE/bin/pfcpsim" ] && [ -x "$CACHE/bin/pfcpctl" ] \
    && [ -f "$CACHE/bess/pybess/builtin_pb/service_pb2_grpc.py" ] \
    && [ -f "$CACHE/bess/pybess/plugin_pb/supdate_msg_pb2.py" ] \
    && [ -x "$CACHE/venv/bin/python" ]
}
if [ "${1:-}" = "--check" ]; then
  built && { echo "CACHE=$CACHE"; exit 0; }
  exit 1
fi
if built; then
  log "up to date in $CACHE"
  echo "CACHE=$CACHE"
  exit 0
fi
mkdir -p "$CACHE/bin"

# ---- Go ------------------------------------------------------------------------------------
go_ok() {  # go >= 1.25 on PATH?
  command -v go >/dev/null 2>&1 || return 1
  local v; v=$(go env GOVERSION 2>/dev/null | sed 's/^go//') || return 1
  local major=${v%%.*} rest=${v#*.}; local minor=${rest%%.*}
  [ "$major" -gt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -ge 25 ]; }
}
[ -x /usr/local/go/bin/go ] && PATH=$PATH:/usr/local/go/bin
if ! go_ok; then
  if [ ! -x "$CACHE/go/bin/go" ]; then
    command -v curl >/dev/null || die "curl is missing: apt-get install -y curl"
    command -v unzip >/dev/null || python3 -c 'import zipfile' \
      || die "neither unzip nor python3's zipfile is available"
    log "Go >= 1.25 not found; fetching go$GO_VERSION from the Go module proxy"
    tmp=$(mktemp -d)
    curl -fsSL -o "$tmp/go.zip" \
      "https://proxy.golang.org/golang.org/toolchain/@v/v0.0.1-go$GO_VERSION.linux-amd64.zip" \
      || die "cannot download the Go toolchain (is proxy.golang.org reachable?)"
    python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
      "$tmp/go.zip" "$tmp/x"
    rm -rf "$CACHE/go"
    mv "$tmp/x/golang.org/toolchain@v0.0.1-go$GO_VERSION.linux-amd64" "$CACHE/go"
    chmod +x "$CACHE/go/bin/"* "$CACHE/go/pkg/tool/"*/* 2>/dev/null || true
    rm -rf "$tmp"
  fi
  PATH=$CACHE/go/bin:$PATH
  go_ok || die "no usable Go toolchain"
fi
export GOFLAGS=${GOFLAGS:--mod=mod} GOTOOLCHAIN=local
# The shared folder is read-only in CI: build from copies (go writes nothing into a module's
# folder with -mod=mod and an up-to-date go.sum, but a copy keeps it that way whatever the
# version of Go).
src=$CACHE/src
rm -rf "$src"; mkdir -p "$src"
cp -r "$TP/omec-upf" "$TP/omec-pfcpsim" "$src/"
chmod -R u+w "$src"
log "building pfcpiface ($(go env GOVERSION))"
(cd "$src/omec-upf" && go build -o "$CACHE/bin/pfcpiface" ./cmd/pfcpiface)
log "building pfcpsim, pfcpctl"
(cd "$src/omec-pfcpsim" && go build -o "$CACHE/bin/pfcpsim" ./cmd/pfcpsim \
  && go build -o "$CACHE/bin/pfcpctl" ./cmd/pfcpctl)

# ---- omec's bessctl + pybess ---------------------------------------------------------------
log "copying omec's bessctl and pybess"
rm -rf "$CACHE/bess"; mkdir -p "$CACHE/bess"
cp -r "$TP/omec-bess/bessctl" "$TP/omec-bess/pybess" "$TP/omec-bess/protobuf" \
  "$TP/omec-bess/sample_plugin" "$CACHE/bess/"
cp -r "$TP/omec-upf/conf/." "$CACHE/bess/bessctl/conf/"
chmod -R u+w "$CACHE/bess"

if [ ! -x "$CACHE/venv/bin/python" ]; then
  python3 -m venv "$CACHE/venv" || die "python3 -m venv failed: apt-get install -y python3-venv"
fi
"$CACHE/venv/bin/python" -c 'import grpc, grpc_tools, google.protobuf, scapy, pyroute2, jsoncomment, iptools, psutil' \
  2>/dev/null || "$CACHE/venv/bin/pip" install -q grpcio grpcio-tools protobuf scapy pyroute2 \
    jsoncomment iptools psutil
log "generating pybess's stubs (as omec's build.py does, with the sample plugin)"
(
  cd "$CACHE/bess"
  gen() {  # srcdir outdir
    local f
    for f in "$1"/*.proto "$1"/ports/*.proto; do
      [ -f "$f" ] || continue
      "$CACHE/venv/bin/python" -m grpc_tools.protoc "$f" --proto_path="$1" \
        --proto_path=protobuf --python_out="$2" --grpc_python_out="$2"
    done
  }
  gen protobuf pybess/builtin_pb
  gen protobuf/tests pybess/builtin_pb
  gen sample_plugin/protobuf pybess/plugin_pb
)
(cd "$CACHE/bess" && "$CACHE/venv/bin/python" -c 'from pybess.bess import BESS') \
  || die "omec's pybess does not import"
rm -rf "$src"
echo "$stamp" >"$CACHE/.stamp"
log "built in $CACHE"
echo "CACHE=$CACHE"
