#!/usr/bin/env bash
# Builds (once, cached by version) containerd, containerd-shim-runc-v2 and ctr
# for the cluster's node image (docs/cluster.md; make test brings a cluster up).
set -euo pipefail
"$(dirname "$0")/../build-containerd.sh" >/dev/null
