#!/usr/bin/env bash
# Builds a developer tool pinned in tools/go.mod (buf, golangci-lint) once and
# caches it by version under the user cache dir. Prints the binary's path.
#   hack/tool.sh buf | hack/tool.sh golangci-lint
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
case "${1:-}" in
  buf) pkg=github.com/bufbuild/buf/cmd/buf; mod=github.com/bufbuild/buf ;;
  golangci-lint) pkg=github.com/golangci/golangci-lint/v2/cmd/golangci-lint; mod=github.com/golangci/golangci-lint/v2 ;;
  *) echo "usage: $0 buf|golangci-lint" >&2; exit 2 ;;
esac
version=$(cd "$root/tools" && GOWORK=off go list -m -f '{{.Version}}' "$mod")
cache="${MICROLET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/microlet}/tools/$1/$version"
bin="$cache/$1"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ ! -x "$bin" ]; then
  echo "tool.sh: building $1 $version (once; cached in $cache)" >&2
  (cd "$root/tools" && GOWORK=off CGO_ENABLED=0 go build -trimpath -o "$bin.tmp" "$pkg")
  mv "$bin.tmp" "$bin"
fi
echo "$bin"
