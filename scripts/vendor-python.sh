#!/usr/bin/env bash
# Installs the bessemer Python package and its pinned dependencies (deploy/python-requirements.txt)
# into DEST, for a system whose python3 is CPython 3.11 on x86-64 (Debian 12), from wheels
# kept in ~/.cache/bessemer/wheels (downloaded from PyPI once). No .pyc files (python3 makes
# them at run time where it may), so the result is byte-for-byte the same every time.
#   vendor-python.sh DEST [PIP]
# and the BESS protocol's Python modules, compiled, beside it in DEST/../cache.
set -euo pipefail
DEST=${1:?usage: vendor-python.sh DEST [PIP]}
HERE=$(cd "$(dirname "$0")/.." && pwd)
PIP=${2:-$HERE/.venv/bin/pip}
WHEELS=${BESSEMER_WHEEL_CACHE:-$HOME/.cache/bessemer/wheels}
REQ=$HERE/deploy/python-requirements.txt
mkdir -p "$WHEELS"
target=(--python-version 3.11 --implementation cp --abi cp311 --platform manylinux2014_x86_64
        --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --only-binary=:all:)
if ! "$PIP" download -q --no-index --find-links "$WHEELS" --dest "$WHEELS" "${target[@]}" -r "$REQ" >/dev/null 2>&1; then
  "$PIP" download -q --dest "$WHEELS" "${target[@]}" -r "$REQ"
fi
rm -rf "$DEST"; mkdir -p "$DEST"
"$PIP" install -q --no-index --find-links "$WHEELS" --target "$DEST" --no-compile --no-deps \
  "${target[@]}" -r "$REQ"
# The client itself, with the .proto files it compiles at first use (a link in the tree).
cp -rL "$HERE/python/bessemer" "$DEST/bessemer"
find "$DEST" -name __pycache__ -prune -exec rm -rf {} +
# pip's own bookkeeping names the installer and its cache paths: not part of the payload.
find "$DEST" -path '*.dist-info/INSTALLER' -delete -o -path '*.dist-info/direct_url.json' -delete
rm -rf "$DEST/bin"
# The BESS protocol's Python modules, compiled now for users without a writable home (the
# launcher points XDG_CACHE_HOME here for them; deploy/bessemer-launcher.py).
CACHE=$(dirname "$DEST")/cache
rm -rf "$CACHE"
XDG_CACHE_HOME=$CACHE PYTHONPATH=$DEST PYTHONDONTWRITEBYTECODE=1 "$(dirname "$PIP")/python" -c 'import bessemer.pb as p; p.load()'
find "$CACHE" -name __pycache__ -prune -exec rm -rf {} +
