#!/usr/bin/env bash
# Builds (once, cached by version) the etcd server the test control plane runs.
set -euo pipefail
"$(dirname "$0")/../build-etcd.sh" >/dev/null
