#!/usr/bin/env bash
# Builds (once, cached by version) containerd, containerd-shim-runc-v2 and ctr
# for the cluster's node image (docs/cluster.md).
set -euo pipefail
# Only for the cluster (no test in make test uses it yet): MICROLET_CLUSTER_DEPS=1.
[ "${MICROLET_CLUSTER_DEPS:-0}" = 1 ] || exit 0
"$(dirname "$0")/../build-containerd.sh" >/dev/null
