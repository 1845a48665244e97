#!/usr/bin/env bash
# Fails when any go.mod in the repository leaves the one Kubernetes minor the
# project tracks (client libraries, test control plane and upstream yardsticks
# move together): k8s.io staging modules at v0.<minor>.x, k8s.io/kubernetes at v1.<minor>.x.
set -euo pipefail
cd "$(dirname "$0")/.."
minor=$(sed -nE 's/^[[:space:]]*(require[[:space:]]+)?k8s.io\/kubernetes v1\.([0-9]+)\..*/\2/p' test/controlplane/go.mod | head -1)
[ -n "$minor" ] || { echo "check-k8s-versions: no k8s.io/kubernetes version in test/controlplane/go.mod" >&2; exit 1; }
staging='api|apimachinery|client-go|component-helpers|component-base|cri-api|cri-client|cri-streaming|streaming|cloud-provider|apiserver|kubelet|controller-manager|kube-scheduler|mount-utils|csi-translation-lib|kms|apiextensions-apiserver|kube-aggregator|dynamic-resource-allocation|endpointslice|externaljwt'
# Exempt: modules that only build a third-party release whose own go.mod
# fixes its Kubernetes libraries (the cluster add-ons CoreDNS and
# metrics-server, docs/cluster-addons.md; the nodes' containerd,
# docs/cluster.md); nothing of ours links them.
exempt='^test/cluster/(addons/(coredns|metrics-server)|containerd)/go\.mod$'
bad=0
while IFS= read -r mod; do
  [[ "$mod" =~ $exempt ]] && continue
  while read -r path ver; do
    case "$path" in
      k8s.io/kubernetes) want="v1.$minor." ;;
      *) want="v0.$minor." ;;
    esac
    # v0.0.0 requires are placeholders that the replace lines pin.
    if [[ "$ver" != "$want"* && "$ver" != "v0.0.0" ]]; then
      echo "check-k8s-versions: $mod: $path $ver is not on Kubernetes 1.$minor ($want*)" >&2
      bad=1
    fi
  done < <(grep -E "^[[:space:]]*(require[[:space:]]+)?k8s\.io/(kubernetes|$staging) v" "$mod" | sed -E 's/^[[:space:]]*(require[[:space:]]+)?//; s/^.*=>[[:space:]]*//' | awk '{print $1, $2}')
done < <(git ls-files '*go.mod')
exit $bad
