#!/usr/bin/env bash
# Builds kube-apiserver from the pinned k8s.io/kubernetes module in test/controlplane
# and caches the binary by version, so only the first run pays the ~10 minute build.
# Prints the binary's path on stdout.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/test/controlplane"
version=$(sed -nE "s/^[[:space:]]*(require[[:space:]]+)?k8s.io\/kubernetes (v[^[:space:]]+).*/\2/p" "$mod/go.mod" | head -1)
[ -n "$version" ] || { echo "build-kube-apiserver: no k8s.io/kubernetes version in $mod/go.mod" >&2; exit 1; }
cache="${MICROLET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/microlet}/kube-apiserver/$version"
bin="$cache/kube-apiserver"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
echo "build-kube-apiserver: building $version (cold: 6-16 min on 2 cores)" >&2
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$version -X $pkg.gitMajor=$(echo "${version#v}" | cut -d. -f1) -X $pkg.gitMinor=$(echo "${version#v}" | cut -d. -f2) -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
(cd "$mod" && GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$bin.tmp" .)
mv "$bin.tmp" "$bin"
echo "$bin"
