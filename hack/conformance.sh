#!/usr/bin/env bash
# make conformance: Kubernetes' own e2e suite against a cluster whose only
# node is microlet (test/conformance, docs/conformance.md).
#
# Builds or reuses what it needs (hack/install-test-deps.sh: etcd, the
# control-plane binaries, e2e.test, agnhost, nonewprivs; the ginkgo CLI when
# PROCS > 1),
# imports the test images offline (and serves the ones pulled with
# pullPolicy Always from a local registry.k8s.io mirror), starts etcd, kube-apiserver,
# kube-scheduler, kube-controller-manager and one microlet node, runs the
# selection and prints passed / failed / skipped. Exit status 1 when a spec
# failed. The default selection also rewrites docs/conformance.md.
#
#   SUITE=NAME    a named selection: node (the default, sig-node
#                 [Conformance]) or nodeconformance (every [NodeConformance]
#                 spec one node can run: no [Serial], [Disruptive], [Flaky],
#                 [Slow], [Feature:...], and no DNS or Services specs, which
#                 need a multi-node cluster); FOCUS/SKIP still override it.
#                 SUITE=full is every [Conformance] spec on a make cluster
#                 cluster (CLUSTER_NAME, default conformance; NODES workers,
#                 default 2): the parallel phase with PROCS processes
#                 (default 4), then the [Serial] phase with one. FOCUS runs
#                 only those specs in the parallel phase (SERIAL_FOCUS: in
#                 the serial phase); KEEP_CLUSTER=1 leaves the cluster up;
#                 NODE_AGENT=kubelet runs the upstream kubelet on the nodes
#                 instead (the report's side column, same containerd and
#                 configuration).
#                 The whole suite's run is recorded in
#                 test/conformance/runs/full/<agent> and docs/conformance.md
#                 regenerated; results default to _output/conformance-full.
#                 SUITE=e2enode is the kubelet's own node suite, e2e_node.test
#                 (hack/build-e2e.sh e2e_node.test, built on first use):
#                 its [NodeConformance] specs without [Serial], [Disruptive],
#                 [Flaky], [Slow], [Feature:...], defined in test/e2e_node/
#                 (FOCUS_FILE; SKIP_FILE leaves files out), against one
#                 microlet node with static pods and clusterDomain
#                 cluster.local. The default selection is recorded in
#                 test/conformance/runs/e2enode and docs/conformance-e2enode.md
#                 written (reasons: test/conformance/reasons-e2enode.yaml;
#                 RECORD=1 records another selection, which the page's
#                 command then names); results default to
#                 _output/conformance-e2enode.
#   FOCUS=RE      specs to run      (default: '\[sig-node\].*\[Conformance\]')
#   SKIP=RE       specs to leave out (default: '\[Serial\]|\[Disruptive\]|\[Flaky\]')
#   PROCS=N       parallel suite processes (default 3; 1 runs e2e.test alone)
#   RESULTS=DIR   junit, suite output, microlet and control-plane logs
#                 (default _output/conformance; emptied at start)
#   REPORT=FILE   write the Markdown report there (default: docs/conformance.md
#                 for the default selection, RESULTS/conformance.md otherwise)
#   DRY_RUN=1     list the selected specs, start nothing
#   RUNTIME_ONLY=1  the node is the upstream kubelet (hack/build-kubelet.sh,
#                 built on first use) on microlet's runtime-shim started
#                 alone, instead of microlet (docs/conformance.md's second
#                 column); results default to _output/conformance-kubelet.
#                 The kubelet sets kernel parameters when it starts; the
#                 harness records them and writes them back at the end.
#
# A run of the default selection is recorded (trimmed junit file and
# meta.json) in test/conformance/runs/<node>/; docs/conformance.md is made
# from the recorded microlet and kubelet-on-runtime-shim runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
default_focus='\[sig-node\].*\[Conformance\]'
default_skip='\[Serial\]|\[Disruptive\]|\[Flaky\]'
suite_focus=$default_focus suite_skip=$default_skip
case "${SUITE:-node}" in
  node) ;;
  full)
    hack/install-test-deps.sh
    e2e=$(hack/build-e2e.sh e2e.test)
    args=(full -e2e-test "$e2e" -agnhost "$(hack/build-e2e.sh agnhost)" -nonewprivs "$(hack/build-e2e.sh nonewprivs)"
          -ginkgo "$(hack/build-e2e.sh ginkgo)" -sample-apiserver "$(hack/build-e2e.sh sample-apiserver)"
          -procs "${PROCS:-4}" -cluster "${CLUSTER_NAME:-conformance}" -workers "${NODES:-2}" -agent "${NODE_AGENT:-microlet}"
          -results "${RESULTS:-_output/conformance-full}"
          -e2e-version "$(sed -nE 's/^[[:space:]]*(require[[:space:]]+)?k8s.io\/kubernetes (v[^[:space:]]+).*/\2/p' test/conformance/upstream/go.mod | head -1)")
    [ -z "${FOCUS:-}" ] || args+=(-focus "$FOCUS")
    [ -z "${SERIAL_FOCUS:-}" ] || args+=(-serial-focus "$SERIAL_FOCUS")
    [ "${KEEP_CLUSTER:-}" != 1 ] || args+=(-keep-cluster)
    [ "${DRY_RUN:-}" != 1 ] || args+=(-dry-run)
    if [ -z "${FOCUS:-}${SERIAL_FOCUS:-}" ] && [ "${DRY_RUN:-}" != 1 ]; then
      args+=(-record "test/conformance/runs/full/${NODE_AGENT:-microlet}" -report "${REPORT:-docs/conformance.md}")
    fi
    mkdir -p bin
    go build -o bin/conformance ./test/conformance/cmd/conformance
    exec bin/conformance "${args[@]}" ;;
  e2enode)
    hack/install-test-deps.sh
    procs=${PROCS:-3}
    # Ginkgo lists specs (a dry run) in one process only.
    [ "${DRY_RUN:-}" != 1 ] || procs=1
    results=${RESULTS:-_output/conformance-e2enode}
    # The selection's defaults: conformance.E2ENodeFocus, E2ENodeSkip, E2ENodeFocusFile.
    args=(run -e2e-node-test "$(hack/build-e2e.sh e2e_node.test)" -agnhost "$(hack/build-e2e.sh agnhost)" -nonewprivs "$(hack/build-e2e.sh nonewprivs)"
          -procs "$procs" -results "$results" -reasons test/conformance/reasons-e2enode.yaml
          -e2e-version "$(sed -nE 's/^[[:space:]]*(require[[:space:]]+)?k8s.io\/kubernetes (v[^[:space:]]+).*/\2/p' test/conformance/upstream/go.mod | head -1)")
    [ "$procs" -le 1 ] || args+=(-ginkgo "$(hack/build-e2e.sh ginkgo)")
    [ -z "${FOCUS:-}" ] || args+=(-focus "$FOCUS")
    [ -z "${SKIP+x}" ] || args+=(-skip "$SKIP")
    [ -z "${FOCUS_FILE+x}" ] || args+=(-focus-file "$FOCUS_FILE")
    [ -z "${SKIP_FILE:-}" ] || args+=(-skip-file "$SKIP_FILE")
    if [ "${DRY_RUN:-}" = 1 ]; then
      args+=(-dry-run)
    elif [ -z "${FOCUS:-}${SKIP+x}${FOCUS_FILE+x}${SKIP_FILE:-}" ] || [ "${RECORD:-}" = 1 ]; then
      args+=(-record test/conformance/runs/e2enode -report "${REPORT:-docs/conformance-e2enode.md}")
    else
      args+=(-report "${REPORT:-$results/conformance-e2enode.md}")
    fi
    mkdir -p bin
    go build -o bin/conformance ./test/conformance/cmd/conformance
    exec bin/conformance "${args[@]}" ;;
  nodeconformance)
    suite_focus='\[NodeConformance\]'
    suite_skip='\[Serial\]|\[Disruptive\]|\[Flaky\]|\[Slow\]|\[Feature:|\[sig-network\] DNS|\[sig-network\] Services|DNS should|Services should' ;;
  *) echo "hack/conformance.sh: SUITE=${SUITE} is not a selection (node, nodeconformance, e2enode, full)" >&2; exit 2 ;;
esac
focus=${FOCUS:-$suite_focus}
skip=${SKIP-$suite_skip}
procs=${PROCS:-3}
runtime_only=${RUNTIME_ONLY:-}
[ "$runtime_only" != 0 ] || runtime_only=""
microlet_record=test/conformance/runs/microlet
kubelet_record=test/conformance/runs/kubelet-on-runtime-shim
if [ -n "$runtime_only" ]; then
  results=${RESULTS:-_output/conformance-kubelet}
  record=$kubelet_record other="microlet=$microlet_record/junit_01.xml"
else
  results=${RESULTS:-_output/conformance}
  record=$microlet_record other="kubelet on runtime-shim=$kubelet_record/junit_01.xml"
fi
default_selection=""
[ "$focus" != "$default_focus" ] || [ "$skip" != "$default_skip" ] || default_selection=1
if [ -z "${REPORT:-}" ]; then
  REPORT=$results/conformance.md
  # docs/conformance.md leads with microlet's column: a kubelet run alone
  # (no recorded microlet run yet) writes its report to the results only.
  if [ -n "$default_selection" ] && { [ -z "$runtime_only" ] || [ -f "$microlet_record/junit_01.xml" ]; }; then REPORT=docs/conformance.md; fi
fi

hack/install-test-deps.sh
e2e=$(hack/build-e2e.sh e2e.test)
agnhost=$(hack/build-e2e.sh agnhost)
nonewprivs=$(hack/build-e2e.sh nonewprivs)
ginkgo=""
[ "$procs" -le 1 ] || ginkgo=$(hack/build-e2e.sh ginkgo)
version=$(sed -nE 's/^[[:space:]]*(require[[:space:]]+)?k8s.io\/kubernetes (v[^[:space:]]+).*/\2/p' test/conformance/upstream/go.mod | head -1)

# Built, then exec'd: `go run` would turn Ctrl-C into exit status 1 before
# the harness has stopped the cluster.
mkdir -p bin
go build -o bin/conformance ./test/conformance/cmd/conformance
args=(run -e2e-test "$e2e" -agnhost "$agnhost" -nonewprivs "$nonewprivs" -procs "$procs" -focus "$focus" -skip "$skip"
      -results "$results" -e2e-version "$version")
[ -z "$ginkgo" ] || args+=(-ginkgo "$ginkgo")
if [ -n "$runtime_only" ]; then kubelet=$(hack/build-kubelet.sh); args+=(-kubelet "$kubelet"); fi
[ -z "$default_selection" ] || args+=(-record "$record" -other-junit "$other")
[ "${DRY_RUN:-}" != 1 ] || args+=(-dry-run)
[ "${DRY_RUN:-}" = 1 ] || args+=(-report "$REPORT")
exec bin/conformance "${args[@]}"
