#!/usr/bin/env bash
# Builds (once, cached by version) the kube-apiserver the test control plane runs.
set -euo pipefail
"$(dirname "$0")/../build-kube-apiserver.sh" >/dev/null
