#!/usr/bin/env bash
# The test cluster's add-ons (test/cluster/addons, docs/cluster-addons.md).
# CoreDNS is built always: `make test` runs it against the test API server
# (test/cluster/addons). kube-proxy, metrics-server and the iptables base
# of the kube-proxy and podnet images are only for the cluster: set
# MICROLET_CLUSTER_DEPS=1 to build them here (addons.EnsureImages builds
# them on first use otherwise). All cached by version.
set -euo pipefail
hack=$(cd "$(dirname "$0")/.." && pwd)
"$hack/build-coredns.sh" >/dev/null
if [ "${MICROLET_CLUSTER_DEPS:-0}" = 1 ]; then
  "$hack/build-kube-proxy.sh" >/dev/null
  "$hack/build-metrics-server.sh" >/dev/null
  "$hack/build-iptables-base.sh" >/dev/null
fi
