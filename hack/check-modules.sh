#!/usr/bin/env bash
# Fails when a Go module of the repository that has packages cannot load them
# (and their tests) from its own go.mod and go.sum, as `make test` and the
# build scripts do with GOWORK=off. A stop once failed after 50 minutes of
# tests because services/podsyncd/upstream's go.sum lacked a module that a
# main-module package it imports had just started to use; this catches that
# in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
bad=0
while IFS= read -r mod; do
  dir=$(dirname "$mod")
  # Modules that only pin versions for `go build <pkg>@module` hold no packages.
  if ! (cd "$dir" && GOWORK=off $GO list ./... 2>/dev/null | grep -q .); then continue; fi
  if ! out=$(cd "$dir" && GOWORK=off GOFLAGS=-mod=readonly $GO list -test -deps ./... 2>&1 >/dev/null); then
    echo "check-modules: $dir does not load with its own go.mod/go.sum (run: cd $dir && GOWORK=off go mod tidy):" >&2
    echo "$out" | grep -v '^go: downloading' >&2
    bad=1
  fi
done < <(git ls-files '*go.mod' ; git ls-files --others --exclude-standard '*go.mod')
exit $bad
