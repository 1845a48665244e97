#!/usr/bin/env bash
# Builds (once, cached by version) Kubernetes' e2e suite and its agnhost test
# image program from test/conformance/upstream: the conformance subset in
# `make test` runs them, `make conformance` runs the whole selection.
set -euo pipefail
"$(dirname "$0")/../build-e2e.sh" e2e.test >/dev/null
"$(dirname "$0")/../build-e2e.sh" agnhost >/dev/null
