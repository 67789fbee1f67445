#!/usr/bin/env bash
# make deb: the Debian package from debian/ (debhelper; debian/rules builds with
# `make bins` and installs with `make install-files PREFIX=/usr`) into target/deb/.
#   build-deb.sh [PROFILE]     PROFILE: release (default) or debug
# The package's file dates come from debian/changelog (SOURCE_DATE_EPOCH), so the same
# build gives the same package bytes. Prints the package's path on its last line.
set -euo pipefail
PROFILE=${1:-release}
cd "$(dirname "$0")/.."
command -v dh >/dev/null || { echo "build-deb: debhelper is missing (make deps installs it)" >&2; exit 1; }
export PROFILE
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(dpkg-parsechangelog -STimestamp)}
export DEB_BUILD_OPTIONS="nocheck${DEB_BUILD_OPTIONS:+ $DEB_BUILD_OPTIONS}"
version=$(dpkg-parsechangelog -SVersion)
ws=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
if [ "$version" != "$ws" ]; then
  echo "build-deb: debian/changelog says $version but Cargo.toml's workspace version is $ws" >&2; exit 1
fi
rm -rf debian/bessemer debian/.debhelper debian/files debian/*.substvars debian/*.debhelper.log
mkdir -p target/deb
# What dpkg-buildpackage -b does, minus its .changes/.buildinfo files in the parent folder
# and the signature: the rules' build and binary targets (Rules-Requires-Root: no).
debian/rules build
debian/rules binary
rm -rf debian/bessemer debian/.debhelper debian/files debian/*.substvars debian/*.debhelper.log
deb=target/deb/bessemer_${version}_amd64.deb
[ -f "$deb" ] || { echo "build-deb: $deb was not made" >&2; exit 1; }
echo "build-deb: $deb ($(du -k "$deb" | cut -f1) KiB)" >&2
echo "$deb"
