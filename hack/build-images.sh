#!/usr/bin/env bash
# Builds the FROM-scratch images of the compose dev box (deploy/compose):
#   <repo>/<service>:<tag>  for podconfig statusd cloudsyncd runtime-shim nodestatusd nodeapi podsyncd
#   <repo>/controlplane:<tag>  etcd + kube-apiserver + kube-scheduler +
#                              kube-controller-manager + devbox
# No base image is pulled: every binary is static (CGO_ENABLED=0), etcd
# included (hack/build-etcd.sh).
#
#   hack/build-images.sh [TAG]     TAG defaults to $MICROLET_IMAGE_TAG or "dev";
#                                  the repo to $MICROLET_IMAGE_REPO or "microlet".
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tag=${1:-${MICROLET_IMAGE_TAG:-dev}}
repo=${MICROLET_IMAGE_REPO:-microlet}
services="podconfig statusd cloudsyncd runtime-shim nodestatusd nodeapi podsyncd"
version=$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo dev)
ldflags="-s -w -X github.com/microlet/microlet/internal/version.Version=$version"

stage=$(mktemp -d "${TMPDIR:-/tmp}/microlet-images.XXXXXX")
trap 'rm -rf "$stage"' EXIT
node="$stage/node" cp="$stage/controlplane"
mkdir -p "$node/bin" "$node/tmp" "$cp/bin" "$cp/tmp" "$cp/rootfs/var/lib/etcd"
chmod 1777 "$node/tmp" "$cp/tmp"

echo "build-images: static binaries" >&2
pkgs=(./cmd/microlet)
for s in $services; do pkgs+=("./services/$s"); done
pkgs+=(./services/runtime-shim/pause)
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$node/bin/" "${pkgs[@]}")
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$cp/bin/devbox" ./deploy/compose/devbox)

for k in kube-apiserver kube-scheduler kube-controller-manager; do
  echo "build-images: $k (cached by version)" >&2
  cp "$("$root/hack/build-k8s.sh" "$k")" "$cp/bin/$k"
done

echo "build-images: etcd (cached by version)" >&2
etcd=${MICROLET_ETCD:-$("$root/hack/build-etcd.sh")}
install -D -m 0755 "$etcd" "$cp/rootfs/usr/bin/etcd"

# The legacy builder is enough for FROM scratch + COPY and needs no buildx;
# its deprecation banner is only shown when a build fails.
export DOCKER_BUILDKIT=0
build() { # image dockerfile context [docker build args...]
  local image=$1 file=$2 ctx=$3
  shift 3
  echo "build-images: $image" >&2
  if ! docker build -q -f "$file" --label org.opencontainers.image.version="$version" -t "$image" "$@" "$ctx" >"$stage/build.log" 2>&1; then
    cat "$stage/build.log" >&2
    exit 1
  fi
}
for s in $services; do
  build "$repo/$s:$tag" "$root/deploy/compose/Dockerfile.node" "$node" --target "$s"
done
build "$repo/controlplane:$tag" "$root/deploy/compose/Dockerfile.controlplane" "$cp"
echo "build-images: done ($repo/*:$tag)" >&2
