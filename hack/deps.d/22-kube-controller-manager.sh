#!/usr/bin/env bash
# Builds (once, cached by version) the kube-controller-manager the test
# control plane runs for tests that ask for it
# (controlplane.Options.ControllerManager, GetFull).
set -euo pipefail
"$(dirname "$0")/../build-kube-controller-manager.sh" >/dev/null
