#!/usr/bin/env bash
# Builds the CNI reference plugins the runtime-shim's cni network mode is
# tested with (bridge, host-local, loopback, portmap, firewall, bandwidth) from the
# github.com/containernetworking/plugins version pinned in test/cniplugins
# (its go.mod lists them as tools) and caches them by version, so only the
# first run pays for the build. Parallel callers wait for one build (flock).
# Prints the cache directory (a CNI bin dir holding the plugins) on stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/test/cniplugins"
version=$(sed -nE "s/^[[:space:]]*(require[[:space:]]+)?github.com\/containernetworking\/plugins (v[^[:space:]]+).*/\2/p" "$mod/go.mod" | head -1)
[ -n "$version" ] || { echo "build-cni-plugins: no github.com/containernetworking/plugins version in $mod/go.mod" >&2; exit 1; }
cache="${MICROLET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/microlet}/cni-plugins/$version"
plugins="main/bridge ipam/host-local main/loopback meta/portmap meta/firewall meta/bandwidth"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
missing=
for p in $plugins; do [ -x "$cache/$(basename "$p")" ] || missing=1; done
if [ -z "$missing" ]; then echo "$cache"; exit 0; fi
echo "build-cni-plugins: building $version (cold: under a CPU-minute)" >&2
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
ldflags="-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$version"
pkgs=
for p in $plugins; do pkgs="$pkgs github.com/containernetworking/plugins/plugins/$p"; done
# shellcheck disable=SC2086 # pkgs is a word list on purpose
(cd "$mod" && GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$tmp/" $pkgs)
for p in $plugins; do mv "$tmp/$(basename "$p")" "$cache/"; done
echo "$cache"
