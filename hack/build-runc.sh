#!/usr/bin/env bash
# Builds runc for the cluster's node image from the github.com/opencontainers/runc
# version pinned in test/cluster/runc (the version containerd's own CI tests the
# pinned containerd with: script/setup/runc-version). cgo with libseccomp
# (libseccomp-dev, hack/deps.d/10-apt.sh) for seccomp profiles, linked statically
# so the binary runs in the node image whatever its libraries. Debian's runc 1.1.5
# with containerd cannot start CRI sandboxes on this host's kernel
# (docs/cluster.md). Cached by version; parallel callers wait for one build
# (flock). Prints the cache directory holding runc on stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/test/cluster/runc"
pkg=github.com/opencontainers/runc
version=$(sed -nE "s/^[[:space:]]*(require[[:space:]]+)?github.com\/opencontainers\/runc (v[^[:space:]]+).*/\2/p" "$mod/go.mod" | head -1)
[ -n "$version" ] || { echo "build-runc: no $pkg version in $mod/go.mod" >&2; exit 1; }
cache="${MICROLET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/microlet}/runc/$version"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -x "$cache/runc" ]; then echo "$cache"; exit 0; fi
[ -e /usr/include/seccomp.h ] || { echo "build-runc: libseccomp-dev is missing (seccomp.h): run hack/deps.d/10-apt.sh" >&2; exit 1; }
echo "build-runc: building $version (cold: about a CPU-minute)" >&2
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
ldflags="-s -w -X main.version=${version#v} -extldflags -static"
(cd "$mod" && GOWORK=off CGO_ENABLED=1 GOFLAGS=-mod=mod go build -trimpath -buildmode=pie -tags "seccomp netgo osusergo static_build" -ldflags "$ldflags" -o "$tmp/runc" "$pkg")
mv "$tmp/runc" "$cache/"
echo "$cache"
