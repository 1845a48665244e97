#!/usr/bin/env bash
# Builds (once, cached by version) the kubectl that tests drive the control plane with.
set -euo pipefail
"$(dirname "$0")/../build-kubectl.sh" >/dev/null
