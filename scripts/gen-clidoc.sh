#!/usr/bin/env bash
# Man pages and shell completions of every installed command, generated from the commands'
# own definitions: the Rust binaries print theirs (clap_mangen, clap_complete; see
# crates/clidoc) when run with BESSEMER_GENERATE=man|bash|zsh|fish, and the Python CLI's
# come from its argparse parser (scripts/gen_python_clidoc.py).
#   gen-clidoc.sh BINDIR OUTDIR [PYTHON]
# writes OUTDIR/man/man1/*.1.gz, OUTDIR/completions/{bash,zsh,fish}/...
set -euo pipefail
BIN=${1:?usage: gen-clidoc.sh BINDIR OUTDIR [PYTHON]}
OUT=${2:?usage: gen-clidoc.sh BINDIR OUTDIR [PYTHON]}
PY=${3:-python3}
case $PY in /*) ;; */*) PY=$PWD/$PY ;; esac
HERE=$(cd "$(dirname "$0")/.." && pwd)
# Pinned dates make the pages reproducible (the deb and the image carry them).
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$HERE" log -1 --format=%ct 2>/dev/null || echo 1)}

mkdir -p "$OUT/man/man1" "$OUT/completions/bash" "$OUT/completions/zsh" "$OUT/completions/fish"
emit() { # emit NAME KIND FILE: one artefact from a Rust binary or the Python CLI
  local name=$1 kind=$2 file=$3
  if [ "$name" = bessemer ]; then
    (cd "$HERE/python" && "$PY" "$HERE/scripts/gen_python_clidoc.py" "$kind") > "$file.tmp"
  else
    BESSEMER_GENERATE=$kind "$BIN/$name" > "$file.tmp"
  fi
  [ -s "$file.tmp" ] || { echo "gen-clidoc: $name gave an empty $kind" >&2; exit 1; }
  mv "$file.tmp" "$file"
}
for name in bessemerd bessemer-controller bessemer-planner bessemer-demo bessemer-httpd bessemer-kv bessemer; do
  if [ "$name" != bessemer ] && [ ! -x "$BIN/$name" ]; then
    echo "gen-clidoc: $BIN/$name is not built" >&2; exit 1
  fi
  emit "$name" man "$OUT/man/man1/$name.1"
  # -n: no name or time stamp in the gzip header, so the same page gives the same bytes.
  gzip -9nf "$OUT/man/man1/$name.1"
  emit "$name" bash "$OUT/completions/bash/$name"
  emit "$name" zsh "$OUT/completions/zsh/_$name"
  emit "$name" fish "$OUT/completions/fish/$name.fish"
done
echo "gen-clidoc: man pages and completions in $OUT" >&2
