#!/usr/bin/env bash
# make image: an OCI image of Bessemer built without a registry.
#   build-image.sh [PROFILE]      (the Debian package of that profile must be built: make deb)
# 1. mmdebstrap makes a minimal Debian 12 root (variant minbase, no docs, man pages or
#    locales) holding the bessemer .deb (bessemerd, the CLI with its Python dependencies, the
#    controller, sample pipelines; apt resolves its Depends) and iproute2;
# 2. bessemerd gets the file capabilities the dataplane uses, so it runs as the unprivileged
#    user 'bessemer' (the package's postinst made it) when the container is given them;
# 3. deploy/image/mkoci.py wraps the root as a one-layer OCI image archive.
# Dates come from debian/changelog (SOURCE_DATE_EPOCH) and mmdebstrap and mkoci.py normalise
# the rest, so the same package and the same Debian packages give the same digest.
# Output: target/image/bessemer-VERSION.oci.tar, and its digest in ...digest.
set -euo pipefail
PROFILE=${1:-release}
cd "$(dirname "$0")/.."
version=$(dpkg-parsechangelog -SVersion)
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(dpkg-parsechangelog -STimestamp)}
deb=$PWD/target/deb/bessemer_${version}_amd64.deb
[ -f "$deb" ] || { echo "build-image: $deb is missing: make deb PROFILE=$PROFILE first" >&2; exit 1; }
command -v mmdebstrap >/dev/null || { echo "build-image: mmdebstrap is missing (make deps installs it)" >&2; exit 1; }
# The Debian mirror this machine uses (BESSEMER_DEBIAN_MIRROR overrides); pin it to a
# snapshot.debian.org URL to get the same digest on another day.
mirror=${BESSEMER_DEBIAN_MIRROR:-$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null | head -1 | awk '{print $2}' || true)}
mirror=${mirror:-http://deb.debian.org/debian}
out=${BESSEMER_IMAGE_OUT:-target/image}; mkdir -p "$out"
work=$(mktemp -d /tmp/bessemer-image.XXXXXX)
trap 'rm -rf "$work"' EXIT
cp "$deb" "$work/bessemer.deb"
# The package's own dependencies (libpcap, DPDK's libraries, ...) as its control file names
# them (dpkg-shlibdeps wrote them), plus iproute2; alternatives take their first choice.
include=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/|.*//; s/(.*)//' | awk 'NF {print $1}' |
  sort -u | paste -sd, -)
include="iproute2,$include"
t0=$SECONDS
# The package goes in by dpkg in a customize hook (apt cannot reach a local file from inside
# the chroot); its dependencies are in --include. setcap runs outside, on the root's file.
mmdebstrap --quiet --mode=root --variant=minbase --format=tar \
  --include="$include" \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-include=/usr/share/doc/bessemer/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --customize-hook="copy-in $work/bessemer.deb /tmp" \
  --customize-hook='chroot "$1" dpkg -i /tmp/bessemer.deb && rm "$1/tmp/bessemer.deb"' \
  --customize-hook='setcap cap_net_admin,cap_net_raw,cap_bpf,cap_perfmon,cap_ipc_lock,cap_sys_nice+ep "$1/usr/bin/bessemerd"' \
  --customize-hook='rm -f "$1"/var/log/*.log "$1"/var/cache/ldconfig/aux-cache "$1"/var/lib/dpkg/*-old' \
  bookworm "$work/rootfs.tar" "$mirror" >&2
echo "build-image: Debian root in $((SECONDS - t0)) s ($(du -m "$work/rootfs.tar" | cut -f1) MiB uncompressed)" >&2
uid=$(tar -xOf "$work/rootfs.tar" ./etc/passwd | awk -F: '$1 == "bessemer" {print $3}')
[ -n "$uid" ] || { echo "build-image: the package made no 'bessemer' user" >&2; exit 1; }
cat > "$work/config.json" <<JSON
{
  "User": "$uid:$uid",
  "Entrypoint": ["/usr/bin/bessemerd"],
  "Cmd": ["--metrics", "127.0.0.1:9100"],
  "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
  "ExposedPorts": {"10514/tcp": {}, "9100/tcp": {}},
  "WorkingDir": "/",
  "StopSignal": "SIGTERM",
  "Labels": {
    "org.opencontainers.image.title": "bessemer",
    "org.opencontainers.image.version": "$version",
    "org.opencontainers.image.licenses": "BSD-3-Clause",
    "org.opencontainers.image.description": "Bessemer packet processor: bessemerd, the bessemer CLI, bessemer-controller",
    "io.bessemer.capabilities": "CAP_NET_ADMIN,CAP_NET_RAW,CAP_BPF,CAP_PERFMON,CAP_IPC_LOCK,CAP_SYS_NICE"
  }
}
JSON
img=$out/bessemer-$version.oci.tar
python3 deploy/image/mkoci.py "$work/rootfs.tar" "$img" --tag "localhost/bessemer:$version" --config "$work/config.json" > "$work/info.json"
digest=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest"])' "$work/info.json")
echo "$digest" > "$img.digest"
echo "build-image: $img $digest, $(du -m "$img" | cut -f1) MiB compressed, user bessemer ($uid), in $((SECONDS - t0)) s" >&2
cat "$work/info.json"
