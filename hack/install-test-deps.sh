#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine: Debian packages
# and the binaries built from pinned Go modules (cached by version). Each
# component adds its own step as hack/deps.d/NN-name.sh; they run in name order.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
for step in "$here"/deps.d/*.sh; do
  [ -e "$step" ] || continue
  echo "install-test-deps: $(basename "$step")" >&2
  bash "$step"
done
