#!/usr/bin/env bash
# Builds (once, cached by version) a static runc with seccomp for the cluster's
# node image (docs/cluster.md); needs 10-apt.sh's gcc and libseccomp-dev.
set -euo pipefail
"$(dirname "$0")/../build-runc.sh" >/dev/null
