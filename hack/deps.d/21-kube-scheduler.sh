#!/usr/bin/env bash
# Builds (once, cached by version) the kube-scheduler the test control plane
# runs for tests that ask for it (controlplane.Options.Scheduler, GetFull).
set -euo pipefail
"$(dirname "$0")/../build-kube-scheduler.sh" >/dev/null
