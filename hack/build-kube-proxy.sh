#!/usr/bin/env bash
# Builds (once, cached by version) the kube-proxy of the test cluster's
# kube-proxy add-on (test/cluster/addons); prints its path. See hack/build-k8s.sh.
exec "$(dirname "$0")/build-k8s.sh" kube-proxy
