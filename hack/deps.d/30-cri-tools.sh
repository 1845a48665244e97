#!/usr/bin/env bash
# Builds (once, cached by version) crictl and critest for the runtime-shim's
# smoke and conformance tests.
set -euo pipefail
"$(dirname "$0")/../build-cri-tools.sh" >/dev/null
