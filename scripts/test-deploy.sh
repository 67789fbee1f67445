#!/usr/bin/env bash
# make test-deploy: the packaging, image, chart and control-plane tests (docs/deploy.md
# "How the tests prove it"). Builds what they need first, each step timed:
#   the Kubernetes binaries (once, into ~/.cache/bessemer/k8s: scripts/k8s-cache.sh),
#   the binaries (debug profile), the Debian package, the OCI image;
# then runs python/tests/test_deploy_*.py. A step that cannot run here (no Go, no root, no
# mmdebstrap) is reported, and the tests needing it skip with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
declare -a times=()
step() { # step NAME CMD...: runs CMD, records its wall time, returns its status
  local name=$1 t0=$SECONDS rc=0; shift
  echo "test-deploy: $name" >&2
  "$@" || rc=$?
  times+=("$name $((SECONDS - t0))s")
  return $rc
}
if [ -x /usr/local/go/bin/go ] || command -v go >/dev/null; then
  # Built from the Go module proxy: where that cannot be reached the build fails for reasons
  # outside the project; the control-plane tests then skip naming what is missing, and the
  # build's own error is shown here.
  if ! step "kubernetes binaries (cached)" scripts/k8s-cache.sh >/dev/null; then
    echo "test-deploy: the Kubernetes binaries could not be built (above): the control-plane tests will be skipped" >&2
  fi
else
  echo "test-deploy: Go is not installed: the control-plane tests will be skipped" >&2
fi
step "binaries (debug)" make -s bins PROFILE=debug
if command -v dh >/dev/null; then
  step "debian package" make -s deb PROFILE=debug >/dev/null
  if [ "$(id -u)" = 0 ] && command -v mmdebstrap >/dev/null; then
    step "image" scripts/build-image.sh debug >/dev/null
  else
    echo "test-deploy: not root or no mmdebstrap: no image, its tests will be skipped" >&2
  fi
else
  echo "test-deploy: debhelper is missing: no package or image, their tests will be skipped" >&2
fi
t0=$SECONDS
(cd python && "../$PY" -m pytest -q -rs tests/test_deploy_packaging.py tests/test_deploy_image.py tests/test_deploy_k8s.py)
times+=("tests $((SECONDS - t0))s")
echo "test-deploy: times: ${times[*]}" >&2
