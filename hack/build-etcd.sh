#!/usr/bin/env bash
# Builds (once, cached by version) the etcd server the test control plane
# runs: go.etcd.io/etcd/server/v3 at the version pinned in
# test/controlplane/etcd/go.mod (what kubeadm v1.36.3 deploys); prints its
# path. See hack/build-addon-tool.sh.
exec "$(dirname "$0")/build-addon-tool.sh" etcd
