#!/usr/bin/env bash
# Regenerates docs/conformance.md from the junit file(s) of conformance runs
# (no cluster, no suite: the report alone). meta.json beside each junit file
# (the harness writes it) adds versions and timings.
#
#   hack/conformance-report.sh [[NAME=]JUNIT ...]
#       default: the recorded runs (test/conformance/runs/microlet and
#       runs/kubelet-on-runtime-shim, those that exist; microlet's falls back
#       to _output/conformance/junit_01.xml)
#       explicit columns: microlet=a/junit_01.xml "kubelet on runtime-shim=b/junit_01.xml"
#   OUT=FILE  where to write (default docs/conformance.md)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ $# -eq 0 ]; then
  m=test/conformance/runs/microlet/junit_01.xml
  [ -f "$m" ] || m=_output/conformance/junit_01.xml
  set -- "microlet=$m"
  k=test/conformance/runs/kubelet-on-runtime-shim/junit_01.xml
  [ ! -f "$k" ] || set -- "$@" "kubelet on runtime-shim=$k"
fi
args=()
for j in "$@"; do args+=(-junit "$j"); done
# The full suite's recorded runs (make conformance SUITE=full).
for f in microlet kubelet; do
  [ ! -d "test/conformance/runs/full/$f" ] || args+=(-full "$f=test/conformance/runs/full/$f")
done
go run ./test/conformance/cmd/conformance report "${args[@]}" -reasons test/conformance/reasons.yaml -o "${OUT:-docs/conformance.md}"
echo "conformance-report: wrote ${OUT:-docs/conformance.md}" >&2
