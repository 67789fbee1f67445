#!/usr/bin/env bash
# Builds the Kubernetes pieces the deploy tests need from the Go module proxy, once, into a
# cache outside the repository (default ~/.cache/bessemer/k8s; BESSEMER_K8S_CACHE overrides):
#   bin/kube-apiserver bin/kubectl (k8s.io/kubernetes v1.37.2), bin/etcd (etcd 3.7.3),
#   bin/helm (helm v3.21.4)
# and, with --node (the opt-in kubelet end-to-end run), bin/kubelet, bin/kube-controller-manager,
# bin/kube-scheduler and bin/pause.
# A binary already in the cache is not rebuilt (each has a stamp naming its version), so a
# warm run takes well under a second. Builds run under `nice` since the machine is shared.
# Prints the cache's bin directory on its last line.
set -euo pipefail

K8S_VERSION=v1.37.2
STAGING_VERSION=v0.37.2
ETCD_VERSION=v3.7.3
HELM_VERSION=v3.21.4
K8S=${BESSEMER_K8S_CACHE:-$HOME/.cache/bessemer/k8s}
NODE=0
for a in "$@"; do
  case "$a" in
    --node) NODE=1 ;;
    *) echo "k8s-cache.sh: unknown argument '$a' (only --node)" >&2; exit 2 ;;
  esac
done

if [ -x /usr/local/go/bin/go ]; then export PATH=/usr/local/go/bin:$PATH; fi
command -v go >/dev/null || { echo "k8s-cache.sh: Go is not installed (need go >= 1.26)" >&2; exit 1; }
mkdir -p "$K8S/bin" "$K8S/src"
export GOFLAGS=-buildvcs=false
log() { echo "k8s-cache: $*" >&2; }

# built NAME VERSION: true when bin/NAME exists and was built from VERSION.
built() { [ -x "$K8S/bin/$1" ] && [ "$(cat "$K8S/bin/.$1.version" 2>/dev/null)" = "$2" ]; }
stamp() { echo "$2" > "$K8S/bin/.$1.version"; }
timed() { # timed NAME CMD...: runs CMD and logs its wall time
  local t0=$SECONDS; "${@:2}"; log "$1 built in $((SECONDS - t0)) s"; }

k8s_module() {
  local d=$K8S/src/kubernetes
  [ -f "$d/go.sum" ] && grep -q "k8s.io/kubernetes $K8S_VERSION" "$d/go.mod" && return 0
  mkdir -p "$d"; cd "$d"
  go mod download "k8s.io/kubernetes@$K8S_VERSION"
  local k; k=$(go env GOMODCACHE)/k8s.io/kubernetes@$K8S_VERSION
  # k8s.io/kubernetes replaces its staging modules with ./staging/..., which the module zip
  # lacks: pin each of them at the matching published version instead.
  { printf 'module k8sbuild\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$K8S_VERSION"
    grep -oE '^\s+k8s.io/[a-z0-9-]+ => ./staging' "$k/go.mod" | awk -v v="$STAGING_VERSION" '{print "\t"$1" => "$1" "v}'
    echo ")"; } > go.mod
  cat > tools.go <<'X'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
X
  go mod tidy
}

k8s_bin() {
  local c=$1
  built "$c" "$K8S_VERSION" && return 0
  k8s_module
  cd "$K8S/src/kubernetes"
  # Without the version ldflags the binaries say v0.0.0-master and version checks (helm's
  # kubeVersion, kubectl's skew warning) misfire.
  local ld="-s -w" p
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=37 -X $p.gitTreeState=clean -X $p.buildDate=2026-12-01T00:00:00Z"
  done
  log "building $c $K8S_VERSION (cold: minutes)"
  timed "$c" nice -n 10 go build -trimpath -ldflags="$ld" -o "$K8S/bin/$c.tmp" "k8s.io/kubernetes/cmd/$c"
  mv "$K8S/bin/$c.tmp" "$K8S/bin/$c"; stamp "$c" "$K8S_VERSION"
}

etcd_bin() {
  built etcd "$ETCD_VERSION" && return 0
  local d=$K8S/src/etcd; mkdir -p "$d"; cd "$d"
  printf 'module etcdbuild\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' > tools.go
  go mod tidy
  log "building etcd $ETCD_VERSION"
  timed etcd nice -n 10 go build -trimpath -ldflags='-s -w' -o "$K8S/bin/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$K8S/bin/etcd.tmp" "$K8S/bin/etcd"; stamp etcd "$ETCD_VERSION"
}

helm_bin() {
  built helm "$HELM_VERSION" && return 0
  local d=$K8S/src/helm; mkdir -p "$d"; cd "$d"
  printf 'module helmbuild\n\ngo 1.26.0\n\nrequire helm.sh/helm/v3 %s\n' "$HELM_VERSION" > go.mod
  printf '//go:build tools\n\npackage tools\n\nimport _ "helm.sh/helm/v3/cmd/helm"\n' > tools.go
  go mod tidy
  # As helm's own Makefile does: without these, helm assumes Kubernetes v1.20 for templates
  # and lint and refuses charts whose kubeVersion asks for more.
  local ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  ld="$ld -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=36"
  ld="$ld -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=36"
  log "building helm $HELM_VERSION"
  timed helm nice -n 10 go build -trimpath -ldflags="$ld" -o "$K8S/bin/helm.tmp" helm.sh/helm/v3/cmd/helm
  mv "$K8S/bin/helm.tmp" "$K8S/bin/helm"; stamp helm "$HELM_VERSION"
}

pause_bin() {
  built pause 1 && return 0
  local d=$K8S/src/pause; mkdir -p "$d"; cd "$d"
  printf 'module pause\n\ngo 1.26.0\n' > go.mod
  cat > main.go <<'X'
// The pod sandbox's process: waits for SIGTERM or SIGINT and exits.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
X
  CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags='-s -w' -o "$K8S/bin/pause" .
  stamp pause 1
}

# Flock so that two test runs starting together do not build the same thing twice.
exec 9>"$K8S/.lock"
flock 9
t0=$SECONDS
etcd_bin
k8s_bin kube-apiserver
k8s_bin kubectl
helm_bin
if [ "$NODE" = 1 ]; then
  k8s_bin kubelet
  k8s_bin kube-controller-manager
  k8s_bin kube-scheduler
  pause_bin
fi
log "ready in $((SECONDS - t0)) s: $K8S/bin"
echo "$K8S/bin"
