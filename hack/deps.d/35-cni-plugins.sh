#!/usr/bin/env bash
# Builds (once, cached by version) the CNI reference plugins for the
# runtime-shim's cni network mode tests.
set -euo pipefail
"$(dirname "$0")/../build-cni-plugins.sh" >/dev/null
