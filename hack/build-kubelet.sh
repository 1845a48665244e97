#!/usr/bin/env bash
# Builds (once, cached by version) the upstream kubelet that
# `make conformance RUNTIME_ONLY=1` runs as the node on runtime-shim; prints
# its path. Only that mode builds it (not make test-deps). See hack/build-k8s.sh.
exec "$(dirname "$0")/build-k8s.sh" kubelet
