#!/usr/bin/env bash
# Regenerates the Go code from proto/ and fails on any difference from what is
# committed, including generated files git does not track.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s proto
if ! git diff --quiet -- proto || [ -n "$(git ls-files --others --exclude-standard proto)" ]; then
  echo "check-proto: generated code is out of date; run 'make proto' and commit:" >&2
  git status --short -- proto >&2
  exit 1
fi
