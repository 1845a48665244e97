#!/usr/bin/env bash
# Builds containerd, containerd-shim-runc-v2 and ctr for the cluster's node image
# from the github.com/containerd/containerd/v2 version pinned in
# test/cluster/containerd (its go.mod lists them as tools; a module of its own
# because containerd v2 needs k8s.io/* v0.37). No cgo: btrfs, the only cgo part,
# stays behind its build tag (no_btrfs). Cached by version, so only the first run
# pays (a few CPU-minutes); parallel callers wait for one build (flock).
# Prints the cache directory holding the three binaries on stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/test/cluster/containerd"
pkg=github.com/containerd/containerd/v2
version=$(sed -nE "s/^[[:space:]]*(require[[:space:]]+)?github.com\/containerd\/containerd\/v2 (v[^[:space:]]+).*/\2/p" "$mod/go.mod" | head -1)
[ -n "$version" ] || { echo "build-containerd: no $pkg version in $mod/go.mod" >&2; exit 1; }
cache="${MICROLET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/microlet}/containerd/$version"
bins="containerd containerd-shim-runc-v2 ctr"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
missing=
for b in $bins; do [ -x "$cache/$b" ] || missing=1; done
if [ -z "$missing" ]; then echo "$cache"; exit 0; fi
echo "build-containerd: building $version (cold: a few CPU-minutes)" >&2
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
ldflags="-s -w -X $pkg/version.Version=$version -X $pkg/version.Package=github.com/containerd/containerd/v2"
pkgs=
for b in $bins; do pkgs="$pkgs $pkg/cmd/$b"; done
# shellcheck disable=SC2086 # pkgs is a word list on purpose
(cd "$mod" && GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -tags no_btrfs -ldflags "$ldflags" -o "$tmp/" $pkgs)
for b in $bins; do mv "$tmp/$b" "$cache/"; done
echo "$cache"
