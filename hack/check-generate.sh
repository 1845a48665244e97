#!/usr/bin/env bash
# Regenerates the code `make generate` writes and fails on any difference from
# what is committed: podconfig's mirror of Kubernetes' internal core types
# (which the static pod UIDs hash), the kubelet's flag list and feature gates, kubeadm's
# KubeletConfiguration (internal/kubeletconfig) and the KubeletConfiguration
# field table (docs/kubelet-config-fields.md).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s generate
out=(services/podconfig/internal/manifest/internal/core internal/kubeletconfig/kubelet_flags.txt
  internal/kubeletconfig/testdata/kubeadm.yaml internal/kubeletconfig/zz_generated_featuregates.go docs/kubelet-config-fields.md)
if ! git diff --quiet -- "${out[@]}" || [ -n "$(git ls-files --others --exclude-standard "${out[@]}")" ]; then
  echo "check-generate: generated code is out of date; run 'make generate' and commit:" >&2
  git status --short -- "${out[@]}" >&2
  exit 1
fi
