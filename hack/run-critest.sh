#!/usr/bin/env bash
# Runs the CRI validation suite (critest from cri-tools, built and cached by
# hack/build-cri-tools.sh) against a Docker-backed runtime-shim, with images
# from a local registry on 127.0.0.1. Prints passed/failed/skipped counts and
# fails on any failure not listed in
# services/runtime-shim/internal/server/testdata/critest-known-failures.txt.
#   MICROLET_CRITEST_FOCUS=<regexp>  runs only the matching specs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/hack/build-cri-tools.sh" >/dev/null
cd "$root"
MICROLET_REQUIRE_CONTROLPLANE=1 exec go test -count=1 -timeout 60m -run '^TestCritest$' -v ./services/runtime-shim/internal/server/ "$@"
