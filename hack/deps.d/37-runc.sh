#!/usr/bin/env bash
# Builds (once, cached by version) a static runc with seccomp for the cluster's
# node image (docs/cluster.md); needs 10-apt.sh's gcc and libseccomp-dev.
set -euo pipefail
# Only for the cluster (no test in make test uses it yet): MICROLET_CLUSTER_DEPS=1.
[ "${MICROLET_CLUSTER_DEPS:-0}" = 1 ] || exit 0
"$(dirname "$0")/../build-runc.sh" >/dev/null
