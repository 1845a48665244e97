#!/usr/bin/env bash
# Regenerates the code `make generate` writes and fails on any difference from
# what is committed (today: podconfig's mirror of Kubernetes' internal core
# types, which the static pod UIDs hash).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s generate
out=services/podconfig/internal/manifest/internal/core
if ! git diff --quiet -- "$out" || [ -n "$(git ls-files --others --exclude-standard "$out")" ]; then
  echo "check-generate: generated code is out of date; run 'make generate' and commit:" >&2
  git status --short -- "$out" >&2
  exit 1
fi
