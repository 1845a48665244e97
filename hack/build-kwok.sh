#!/usr/bin/env bash
# Builds kwok (sigs.k8s.io/kwok), the side-by-side yardstick of the nodestatusd
# benchmark, once per version through the module proxy and caches the binary
# under the user cache dir. Prints the binary's path on stdout.
#   hack/build-kwok.sh [version]    (default v0.8.0)
set -euo pipefail
version="${1:-v0.8.0}"
cache="${MICROLET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/microlet}/tools/kwok/$version"
bin="$cache/kwok"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ ! -x "$bin" ]; then
  echo "build-kwok: building kwok $version (once; cached in $cache)" >&2
  # go install from outside any module: kwok's own go.mod decides its
  # dependencies, nothing in this repository's go.mod changes.
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && GOWORK=off GOFLAGS= CGO_ENABLED=0 GOBIN="$tmp" go install -trimpath "sigs.k8s.io/kwok/cmd/kwok@$version")
  mv "$tmp/kwok" "$bin"
fi
echo "$bin"
