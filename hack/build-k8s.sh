#!/usr/bin/env bash
# Builds one Kubernetes binary from the pinned k8s.io/kubernetes module in
# test/controlplane (its main package is test/controlplane/NAME) and caches it
# by version, so only the first run pays for the build. Parallel callers wait
# for one build (flock). Prints the binary's path on stdout.
#   hack/build-k8s.sh NAME        NAME: kube-apiserver, kube-scheduler,
#                                 kube-controller-manager, kubectl or kubelet
#                                 kube-proxy (the cluster add-on)
#                                 (kubelet: only for make conformance RUNTIME_ONLY=1)
# hack/build-<NAME>.sh call it.
set -euo pipefail
name=${1:?usage: hack/build-k8s.sh NAME (a directory of test/controlplane)}
root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/test/controlplane"
[ -f "$mod/$name/main.go" ] || { echo "build-k8s: no main package $mod/$name" >&2; exit 1; }
version=$(sed -nE "s/^[[:space:]]*(require[[:space:]]+)?k8s.io\/kubernetes (v[^[:space:]]+).*/\2/p" "$mod/go.mod" | head -1)
[ -n "$version" ] || { echo "build-k8s: no k8s.io/kubernetes version in $mod/go.mod" >&2; exit 1; }
cache="${MICROLET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/microlet}/$name/$version"
bin="$cache/$name"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
echo "build-k8s: building $name $version (cold, 2 cores: kube-apiserver 6-16 min, the others a few with its build cache)" >&2
# Both version packages: servers report component-base's, clients
# (kubectl version) client-go's, and clients refuse to parse an empty one.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=$version -X $pkg.gitMajor=$(echo "${version#v}" | cut -d. -f1) -X $pkg.gitMinor=$(echo "${version#v}" | cut -d. -f2) -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
(cd "$mod" && GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$bin.tmp" "./$name")
mv "$bin.tmp" "$bin"
echo "$bin"
