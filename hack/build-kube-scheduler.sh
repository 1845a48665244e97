#!/usr/bin/env bash
# Builds (once, cached by version) the kube-scheduler the test control plane
# runs when asked to; prints its path. See hack/build-k8s.sh.
exec "$(dirname "$0")/build-k8s.sh" kube-scheduler
