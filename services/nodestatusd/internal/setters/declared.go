package setters

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-helpers/nodedeclaredfeatures"
	"k8s.io/component-helpers/nodedeclaredfeatures/features"
)

// Implemented answers, by Kubernetes feature gate name, whether microlet
// does what the gate turns on in the kubelet. Only these gates decide which
// features a Node declares; a gate missing here counts as not implemented,
// so a feature added to component-helpers' registry is never claimed by
// accident. docs/nodestatusd.md explains each answer.
var Implemented = map[string]bool{
	// nodeapi translates WebSocket exec/attach/port-forward to the CRI's SPDY.
	"ExtendWebSocketsToKubelet": true,
	// podsyncd resizes running containers in place (allocation package)...
	"InPlacePodVerticalScaling": true,
	// ...including init containers (their allocation follows the spec).
	"InPlacePodVerticalScalingInitContainers": true,
	// podsyncd runs pod-level resources but marks a change of them Infeasible.
	"PodLevelResources":                       true,
	"InPlacePodLevelResourcesVerticalScaling": false,
	// podsyncd has no RestartAllContainers container restart rule action.
	"RestartAllContainersOnContainerExits": false,
	// runtime-shim reports no user namespaces with host network.
	"UserNamespacesHostNetworkSupport": false,
}

// gates is the nodedeclaredfeatures.FeatureGate over Implemented.
type gates map[string]bool

// Enabled says whether microlet implements the gate's behaviour.
func (g gates) Enabled(name string) bool { return g[name] }

// NodeFeatures is the list a Node declares in status.declaredFeatures, the
// kubelet's discovery over component-helpers' registry of all features with
// the answers of Implemented, for the Kubernetes release k8sVersion (an
// unparsable one skips the features' version limits). The list is sorted.
func NodeFeatures(k8sVersion string) []string {
	var v *utilversion.Version
	if parsed, err := utilversion.ParseGeneric(k8sVersion); err == nil {
		v = parsed
	}
	registry := append([]nodedeclaredfeatures.Feature(nil), features.AllFeatures...)
	return nodedeclaredfeatures.New(registry).DiscoverNodeFeatures(&nodedeclaredfeatures.NodeConfiguration{
		FeatureGates: gates(Implemented),
		Version:      v,
		// The CRI reports no runtime features (runtime-shim has none of them).
		RuntimeFeatures: nodedeclaredfeatures.RuntimeFeatures{},
	})
}

// DeclaredFeatures sets status.declaredFeatures to NodeFeatures of the
// agent's Kubernetes release (Inputs.Version), computed once: the API
// server refuses pod updates whose features the Node does not declare
// (such as resizing a non-sidecar init container), and the scheduler
// filters pods the same way.
func DeclaredFeatures(in *Inputs) Setter {
	list := NodeFeatures(in.Version)
	return func(_ context.Context, node *corev1.Node) error {
		node.Status.DeclaredFeatures = append([]string(nil), list...)
		return nil
	}
}
