#!/usr/bin/env bash
# Builds crictl and critest from sigs.k8s.io/cri-tools at a pinned version and
# caches both by version, so only the first run pays the ~7 CPU-minute build.
# `go install` cannot be used (the proxy filters the module's version list), so
# the module is downloaded, copied out of the read-only module cache and built
# in place. critest is a Ginkgo test binary, hence `go test -c`.
# Prints the cache directory (holding crictl and critest) on stdout.
set -euo pipefail
version="${CRI_TOOLS_VERSION:-v1.36.0}"
cache="${MICROLET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/microlet}/cri-tools/$version"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -x "$cache/crictl" ] && [ -x "$cache/critest" ]; then echo "$cache"; exit 0; fi
echo "build-cri-tools: building $version (cold: ~7 CPU-min)" >&2
export GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0
dir=$(cd "$cache" && GO111MODULE=on go mod download -json "sigs.k8s.io/cri-tools@$version" | sed -nE 's/^[[:space:]]*"Dir": "(.*)",?$/\1/p')
[ -d "$dir" ] || { echo "build-cri-tools: download of sigs.k8s.io/cri-tools@$version failed" >&2; exit 1; }
src=$(mktemp -d "${TMPDIR:-/tmp}/cri-tools-src.XXXXXX")
trap 'chmod -R u+w "$src" 2>/dev/null; rm -rf "$src"' EXIT
cp -r "$dir/." "$src/"
chmod -R u+w "$src"
cd "$src"
# The module vendors its dependencies; build from the vendor dir when present.
mod=-mod=mod; [ -d vendor ] && mod=-mod=vendor
ldflags="-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$version"
GOFLAGS="$mod" go build -trimpath -ldflags "$ldflags" -o "$cache/crictl.tmp" ./cmd/crictl
GOFLAGS="$mod" go test -c -trimpath -ldflags "$ldflags" -o "$cache/critest.tmp" ./cmd/critest
mv "$cache/crictl.tmp" "$cache/crictl"
mv "$cache/critest.tmp" "$cache/critest"
echo "$cache"
