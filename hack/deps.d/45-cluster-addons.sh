#!/usr/bin/env bash
# The test cluster's add-ons (test/cluster/addons, docs/cluster-addons.md):
# make test brings a cluster up (test/cluster) and runs CoreDNS against the
# test API server. All cached by version.
set -euo pipefail
hack=$(cd "$(dirname "$0")/.." && pwd)
"$hack/build-coredns.sh" >/dev/null
"$hack/build-kube-proxy.sh" >/dev/null
"$hack/build-metrics-server.sh" >/dev/null
"$hack/build-iptables-base.sh" >/dev/null
