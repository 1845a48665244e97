#!/usr/bin/env bash
# Builds (once, cached by version) the kube-apiserver the test control plane
# runs; prints its path. See hack/build-k8s.sh.
exec "$(dirname "$0")/build-k8s.sh" kube-apiserver
