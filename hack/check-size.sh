#!/usr/bin/env bash
# Fails when git tracks a file over 1 MiB: build outputs and binaries never
# belong in the repository (a whole submission was once refused for its size).
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
while IFS= read -r f; do
  [ -f "$f" ] || continue
  size=$(stat -c %s "$f")
  if [ "$size" -gt 1048576 ]; then echo "check-size: $f is $size bytes (limit 1 MiB)" >&2; bad=1; fi
done < <(git ls-files)
exit $bad
