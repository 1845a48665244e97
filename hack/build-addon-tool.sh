#!/usr/bin/env bash
# Builds one upstream program from a module of its own (a go.mod with a
# `tool` line naming the upstream main package, so nothing upstream is
# copied) and caches it by the module's pinned version: only the first run
# pays for the build. Static (CGO_ENABLED=0); parallel callers wait for one
# build (flock). Prints the binary's path on stdout.
#   hack/build-addon-tool.sh NAME    NAME: coredns or metrics-server (the test
#                                    cluster's add-ons, test/cluster/addons/NAME),
#                                    or etcd (the test control plane's etcd,
#                                    test/controlplane/etcd)
# hack/build-coredns.sh, hack/build-metrics-server.sh and hack/build-etcd.sh call it.
set -euo pipefail
name=${1:?usage: hack/build-addon-tool.sh NAME (a module under test/cluster/addons)}
root=$(cd "$(dirname "$0")/.." && pwd)
case $name in
  etcd) mod="$root/test/controlplane/etcd" ;;
  *) mod="$root/test/cluster/addons/$name" ;;
esac
[ -f "$mod/go.mod" ] || { echo "build-addon-tool: no module $mod" >&2; exit 1; }
pkg=$(sed -nE 's/^tool[[:space:]]+([^[:space:]]+).*/\1/p' "$mod/go.mod" | head -1)
[ -n "$pkg" ] || { echo "build-addon-tool: no tool line in $mod/go.mod" >&2; exit 1; }
case $name in
  coredns) upstream=github.com/coredns/coredns ;;
  metrics-server) upstream=sigs.k8s.io/metrics-server ;;
  etcd) upstream=go.etcd.io/etcd/server/v3 ;;
  *) echo "build-addon-tool: unknown add-on $name" >&2; exit 1 ;;
esac
version=$(sed -nE "s|^[[:space:]]*(require[[:space:]]+)?$upstream (v[^[:space:]]+).*|\2|p" "$mod/go.mod" | head -1)
[ -n "$version" ] || { echo "build-addon-tool: no $upstream version in $mod/go.mod" >&2; exit 1; }
cache="${MICROLET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/microlet}/$name/$version"
bin="$cache/$name"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
echo "build-addon-tool: building $name $version (cold: a few minutes on 2 cores)" >&2
ldflags="-s -w"
case $name in
  coredns) ldflags="$ldflags -X github.com/coredns/coredns/coremain.GitCommit=$version" ;;
  metrics-server) ldflags="$ldflags -X k8s.io/client-go/pkg/version.gitVersion=$version -X k8s.io/client-go/pkg/version.gitCommit=$version -X k8s.io/client-go/pkg/version.buildDate=1970-01-01T00:00:00Z" ;;  # its Makefile stamps client-go's version package
  etcd) ldflags="$ldflags -X go.etcd.io/etcd/api/v3/version.GitSHA=$version" ;;  # etcd --version prints it
esac
(cd "$mod" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$bin.tmp" "$pkg")
mv "$bin.tmp" "$bin"
echo "$bin"
