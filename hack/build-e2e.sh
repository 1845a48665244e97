#!/usr/bin/env bash
# Builds one program of Kubernetes' end-to-end tooling from the pinned module in
# test/conformance/upstream and caches it by version (parallel callers wait for
# one build, flock), like hack/build-k8s.sh. Prints the binary's path on stdout.
#   hack/build-e2e.sh e2e.test   the suite, a test binary of k8s.io/kubernetes/test/e2e
#                                (cold: ~15-25 min on 2 shared cores)
#   hack/build-e2e.sh e2e_node.test  the kubelet's own node suite, a test binary of
#                                k8s.io/kubernetes/test/e2e_node (cold: ~15-25 min too;
#                                only `make conformance SUITE=e2enode` needs it)
#   hack/build-e2e.sh agnhost    the suite's multi-purpose test image program, static
#   hack/build-e2e.sh nonewprivs the program of the nonewprivs test image, static
#   hack/build-e2e.sh sample-apiserver  k8s.io/sample-apiserver, static: the aggregated
#                                API server the full suite's aggregator specs run
#   hack/build-e2e.sh ginkgo     the ginkgo CLI at the version the suite links
#                                (it runs e2e.test in parallel processes)
set -euo pipefail
name=${1:?usage: hack/build-e2e.sh e2e.test|e2e_node.test|agnhost|nonewprivs|sample-apiserver|ginkgo}
root=$(cd "$(dirname "$0")/.." && pwd)
mod="$root/test/conformance/upstream"
modversion() { sed -nE "s#^[[:space:]]*(require[[:space:]]+)?$1 (v[^[:space:]]+).*#\2#p" "$mod/go.mod" | head -1; }
k8s=$(modversion k8s.io/kubernetes)
[ -n "$k8s" ] || { echo "build-e2e: no k8s.io/kubernetes version in $mod/go.mod" >&2; exit 1; }
case "$name" in
  e2e.test) version=$k8s; pkg=k8s.io/kubernetes/test/e2e ;;
  e2e_node.test) version=$k8s; pkg=k8s.io/kubernetes/test/e2e_node ;;
  agnhost)  version=$k8s; pkg=k8s.io/kubernetes/test/images/agnhost ;;
  nonewprivs) version=$k8s; pkg=k8s.io/kubernetes/test/images/nonewprivs ;;
  sample-apiserver) version=$k8s; pkg=k8s.io/sample-apiserver ;;
  # The version the suite links, from the module graph (an indirect
  # requirement need not be listed in go.mod).
  ginkgo)   version=$(cd "$mod" && GOWORK=off GOFLAGS=-mod=mod go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2); pkg=github.com/onsi/ginkgo/v2/ginkgo ;;
  *) echo "build-e2e: unknown program $name (e2e.test, e2e_node.test, agnhost, nonewprivs, sample-apiserver or ginkgo)" >&2; exit 2 ;;
esac
[ -n "$version" ] || { echo "build-e2e: no version for $name in $mod/go.mod" >&2; exit 1; }
cache="${MICROLET_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/microlet}/$name/$version"
bin="$cache/$name"
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if [ -x "$bin" ]; then echo "$bin"; exit 0; fi
echo "build-e2e: building $name $version (cold; e2e.test takes 15-25 min on 2 cores)" >&2
# The suite reports and compares versions: give it the release it was cut from.
ldflags="-s -w"
for vpkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $vpkg.gitVersion=$k8s -X $vpkg.gitMajor=$(echo "${k8s#v}" | cut -d. -f1) -X $vpkg.gitMinor=$(echo "${k8s#v}" | cut -d. -f2) -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"
done
cd "$mod"
export GOWORK=off CGO_ENABLED=0 GOFLAGS=-mod=mod
if [ "$name" = e2e.test ] || [ "$name" = e2e_node.test ]; then
  nice go test -c -trimpath -ldflags "$ldflags" -o "$bin.tmp" "$pkg"
else
  nice go build -trimpath -ldflags "$ldflags" -o "$bin.tmp" "$pkg"
fi
mv "$bin.tmp" "$bin"
echo "$bin"
