#!/usr/bin/env bash
# make bench: every benchmark of the repository that prints its numbers in a
# bounded time on a 2-core machine, each with a short -benchtime (or the
# smallest knobs), one after another. The convention they follow is
# docs/architecture.md, "Benchmarks"; their recorded numbers are in the
# services' docs. Not part of make test or CI.
#
#   make bench                 unit benchmarks, then the node-level ones
#   make bench BENCH_SET=unit  only those that need neither Docker nor an API server
#   make bench BENCH_SET=node  only the node-level ones
#   make bench HEAVY=1         also the long runs: BenchmarkHousekeeping (110
#                              pods, 3-min window), BenchmarkPodStartup's
#                              110-pod batch, statusd's BenchmarkStatusManagers
#                              and podconfig's upstreambench (modules building
#                              k8s.io/kubernetes), nodestatusbench beside kwok
#   BENCHTIME=1s               the unit benchmarks' -benchtime (default 200ms)
#   DRY_RUN=1                  print the commands only
#
# Node-level benchmarks need what make test needs (Docker, root, and the
# test dependencies, which this script installs as make test does) and run with MICROLET_REQUIRE_CONTROLPLANE=1, so a missing piece
# fails instead of skipping; they hold $BENCH_LOCK (flock) so two benchmark
# runs never share the machine. Each go test has its own -timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
go=${GO:-go}
set_=${BENCH_SET:-all}
heavy=${HEAVY:-0}
benchtime=${BENCHTIME:-200ms}
lock=${BENCH_LOCK:-/tmp/microlet-bench.lock}
case $set_ in all | unit | node) ;; *)
  echo "BENCH_SET=$set_: want all, unit or node" >&2
  exit 2
  ;;
esac

# Every package with a Benchmark must be one of the rows below (the unit
# list, or a node-level row naming it): a new one fails here until it is.
unit_pkgs=(
  ./services/podconfig/internal/merge/
  ./services/podsyncd/internal/containergc/
  ./services/podsyncd/internal/imagegc/
  ./services/podsyncd/internal/containerlogs/
  ./services/podsyncd/internal/eviction/
  ./services/podsyncd/internal/server/
  ./services/nodestatusd/internal/statusupdate/
  ./services/nodeapi/internal/logs/
  ./services/statusd/internal/syncer/
  ./services/runtime-shim/internal/crilog/
  ./services/cloudsyncd/internal/server/
  ./internal/stats/
)
node_pkgs=(
  ./internal/testenv/controlplane/
  ./services/runtime-shim/internal/server/
  ./services/runtime-shim/internal/bench/
  ./services/nodeapi/e2e/
  ./services/podsyncd/e2e/
  ./services/statusd/bench/
  ./test/cluster/addons/podnet/
  ./test/cluster/
)
missing=$(git grep -l '^func Benchmark' -- '*_test.go' | xargs -n1 dirname | sort -u | while read -r d; do
  case " ${unit_pkgs[*]} ${node_pkgs[*]} " in *" ./$d/ "*) ;; *) echo "./$d/" ;; esac
done)
if [ -n "$missing" ]; then
  echo "hack/bench.sh does not run the benchmarks of: $missing (add a row)" >&2
  exit 2
fi

failed=()
# run NAME CMD...: runs one benchmark command and remembers a failure.
run() {
  local name=$1
  shift
  echo "=== bench: $name"
  echo "+ $*"
  [ "${DRY_RUN:-0}" = 1 ] && return 0
  if ! "$@"; then
    failed+=("$name")
  fi
}
# locked CMD...: CMD under the benchmark lock.
locked() { flock "$lock" "$@"; }
gotest=("$go" test -run '^$')

if [ "$set_" != node ]; then
  # Unit benchmarks: in-process, fakes for the runtime, seconds each.
  run unit "${gotest[@]}" -benchmem -bench . -benchtime "$benchtime" -timeout 20m "${unit_pkgs[@]}"
  run podconfigbench "$go" run ./services/podconfig/cmd/podconfigbench -pods 1000 -changes 20
fi

if [ "$set_" != unit ]; then
  [ "${DRY_RUN:-0}" = 1 ] || hack/install-test-deps.sh # cached: quick once done
  export MICROLET_REQUIRE_CONTROLPLANE=1
  run controlplane locked "${gotest[@]}" -bench StartStop -benchtime 1x -timeout 20m ./internal/testenv/controlplane/
  run runtime-shim-server locked "${gotest[@]}" -bench 'Stats|LogCopy' -benchtime 1x -timeout 30m ./services/runtime-shim/internal/server/
  run runtime-shim-bench locked "${gotest[@]}" -bench . -benchtime 1x -timeout 30m ./services/runtime-shim/internal/bench/
  run nodeapi-e2e locked "${gotest[@]}" -bench . -benchtime 1x -timeout 40m ./services/nodeapi/e2e/
  run podnet-pod-to-pod locked "${gotest[@]}" -bench PodToPod -benchtime 1s -timeout 10m ./test/cluster/addons/podnet/
  run cluster-pod-network locked "${gotest[@]}" -bench ClusterPodNetwork -benchtime 1x -timeout 25m ./test/cluster/
  run podsyncd-startup locked env MICROLET_BENCH_PODS=10,30 "${gotest[@]}" -bench PodStartup -benchtime 1x -timeout 40m ./services/podsyncd/e2e/
  if [ "$heavy" = 1 ]; then
    run podsyncd-startup-110 locked env MICROLET_BENCH_PODS=110 "${gotest[@]}" -bench PodStartup -benchtime 1x -timeout 60m ./services/podsyncd/e2e/
    run podsyncd-housekeeping locked "${gotest[@]}" -bench Housekeeping -benchtime 1x -timeout 60m ./services/podsyncd/e2e/
    run statusd-managers locked sh -c "cd services/statusd/bench && $go test -run '^\$' -bench StatusManagers -benchtime 800x -timeout 90m ."
    run podconfig-upstream sh -c "cd services/podconfig/bench && $go run ./cmd/upstreambench -pods 1000 -changes 20"
    run nodestatusbench locked "$go" run ./services/nodestatusd/cmd/nodestatusbench -nodes 100,1000 -duration 2m
  fi
fi

if [ ${#failed[@]} -gt 0 ]; then
  echo "bench: failed: ${failed[*]}" >&2
  exit 1
fi
