package admission

import (
	"fmt"
	"runtime"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	schedcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/services/podsyncd/internal/resources"
)

// Result is an admission decision.
type Result struct {
	Admit   bool
	Reason  string
	Message string
}

// The kubelet's reasons of the predicate handler's checks before the
// general predicates.
const (
	ReasonOSSelectorMismatch = "PodOSSelectorNodeLabelDoesNotMatch"
	ReasonOSNotSupported     = "PodOSNotSupported"
	// ReasonNodeAffinity refuses a pod whose required node affinity or
	// node selector the node's labels do not match.
	ReasonNodeAffinity = "NodeAffinity"
	// ReasonSupplementalGroupsPolicyNotSupported refuses a pod asking for
	// SupplementalGroupsPolicy Strict on a node whose runtime cannot keep
	// it (status.features.supplementalGroupsPolicy not true).
	ReasonSupplementalGroupsPolicyNotSupported = "SupplementalGroupsPolicyNotSupported"
)

// Admit checks pod against node with the already admitted, still running
// pods, in the order of the kubelet's predicate handler: the pod's OS
// label and field, its SupplementalGroupsPolicy against the node's
// features, then the general predicates (resources, node affinity, node
// name, host ports), then NoExecute taints; the first failure is the
// answer.
func Admit(pod *corev1.Pod, node *corev1.Node, running []*corev1.Pod) Result {
	if node == nil {
		return Result{Admit: true}
	}
	if osLabelMismatch(pod) {
		return Result{Reason: ReasonOSSelectorMismatch, Message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"}
	}
	if pod.Spec.OS != nil && string(pod.Spec.OS.Name) != runtime.GOOS {
		return Result{Reason: ReasonOSNotSupported, Message: "Failed to admit pod as the OS field doesn't match node OS"}
	}
	if strictGroupsUnsupported(pod, node) {
		return Result{Reason: ReasonSupplementalGroupsPolicyNotSupported,
			Message: fmt.Sprintf("SupplementalGroupsPolicy=%s is not supported in this node", corev1.SupplementalGroupsPolicyStrict)}
	}
	if r, bad := resourcesFit(pod, node, running); bad {
		return r
	}
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !ok {
		return fail(ReasonNodeAffinity, "node(s) didn't match Pod's node affinity/selector")
	}
	if pod.Spec.NodeName != "" && pod.Spec.NodeName != node.Name {
		return fail("NodeName", "node(s) didn't match the requested node name")
	}
	if portsConflict(pod, running) {
		return fail("NodePorts", "node(s) didn't have free ports for the requested pod ports")
	}
	if !podsource.IsStatic(pod) { // static pods skip the taint check, as upstream's do
		_, untolerated := schedcorev1.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Spec.Tolerations, func(t *corev1.Taint) bool {
			return t.Effect == corev1.TaintEffectNoExecute
		}, false)
		if untolerated {
			return fail("TaintToleration", "node(s) had taints that the pod didn't tolerate")
		}
	}
	return Result{Admit: true}
}

// strictGroupsUnsupported says whether pod asks for SupplementalGroupsPolicy
// Strict while the node does not declare support for it (the feature is GA,
// so the kubelet's check always applies).
func strictGroupsUnsupported(pod *corev1.Pod, node *corev1.Node) bool {
	sc := pod.Spec.SecurityContext
	if sc == nil || sc.SupplementalGroupsPolicy == nil || *sc.SupplementalGroupsPolicy != corev1.SupplementalGroupsPolicyStrict {
		return false
	}
	return node.Status.Features == nil || node.Status.Features.SupplementalGroupsPolicy == nil || !*node.Status.Features.SupplementalGroupsPolicy
}

// osLabelMismatch says whether the pod's kubernetes.io/os label (its
// label, not its selector: the kubelet compares the label) names another
// OS than this node's. The kubelet compares with the node's label
// corrected to its own OS, which is always this OS.
func osLabelMismatch(pod *corev1.Pod) bool {
	want, ok := pod.Labels[corev1.LabelOSStable]
	return ok && want != runtime.GOOS
}

func fail(name, desc string) Result {
	return Result{Reason: name, Message: fmt.Sprintf("Predicate %s failed: %s", name, desc)}
}

func requests(pod *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
}

func resourcesFit(pod *corev1.Pod, node *corev1.Node, running []*corev1.Pod) (Result, bool) {
	alloc := node.Status.Allocatable
	maxPods := alloc[corev1.ResourcePods]
	if int64(len(running)+1) > maxPods.Value() {
		return insufficient(corev1.ResourcePods, 1, int64(len(running)), maxPods.Value()), true
	}
	want := requests(pod)
	used := corev1.ResourceList{}
	for _, p := range running {
		for name, q := range requests(p) {
			cur := used[name]
			cur.Add(q)
			used[name] = cur
		}
	}
	// What the node does not have counts as none of it, as in the
	// scheduler's Fits; extended resources the node does not know are
	// left out (cluster-level resources), hugepages are not.
	names := []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}
	var scalars []corev1.ResourceName
	for name := range want {
		if _, known := alloc[name]; isScalar(name) && (known || !isExtended(name)) {
			scalars = append(scalars, name)
		}
	}
	slices.Sort(scalars)
	for _, name := range append(names, scalars...) {
		req, ok := want[name]
		if !ok || value(name, req) <= 0 {
			continue
		}
		capacity, u := alloc[name], used[name]
		if value(name, req) > value(name, capacity)-value(name, u) {
			return insufficient(name, value(name, req), value(name, u), value(name, capacity)), true
		}
	}
	return Result{}, false
}

// isExtended is the API's extended resource name: outside the
// kubernetes.io domains, with a domain, not a quota "requests." key.
func isExtended(name corev1.ResourceName) bool {
	n := string(name)
	return strings.Contains(n, "/") && !strings.Contains(n, corev1.ResourceDefaultNamespacePrefix) &&
		!strings.HasPrefix(n, corev1.DefaultResourceRequestsPrefix)
}

// isScalar is the scheduler's scalar resource: extended, hugepages,
// kubernetes.io-prefixed native or attachable-volume resources.
func isScalar(name corev1.ResourceName) bool {
	n := string(name)
	return isExtended(name) || strings.HasPrefix(n, corev1.ResourceHugePagesPrefix) ||
		strings.Contains(n, corev1.ResourceDefaultNamespacePrefix) || strings.HasPrefix(n, "attachable-volumes-")
}

// value is millicores for cpu, bytes otherwise, the units upstream reports.
func value(name corev1.ResourceName, q resource.Quantity) int64 {
	if name == corev1.ResourceCPU {
		return q.MilliValue()
	}
	return q.Value()
}

func insufficient(name corev1.ResourceName, requested, used, capacity int64) Result {
	return Result{
		Reason:  InsufficientResourcePrefix + string(name),
		Message: fmt.Sprintf("Node didn't have enough resource: %s, requested: %d, used: %d, capacity: %d", name, requested, used, capacity),
	}
}

type hostPort struct {
	ip    string
	proto corev1.Protocol
	port  int32
}

func ports(pod *corev1.Pod) []hostPort {
	var out []hostPort
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.HostPort <= 0 {
				continue
			}
			proto := p.Protocol
			if proto == "" {
				proto = corev1.ProtocolTCP
			}
			ip := p.HostIP
			if ip == "" {
				ip = "0.0.0.0"
			}
			out = append(out, hostPort{ip, proto, p.HostPort})
		}
	}
	return out
}

func portsConflict(pod *corev1.Pod, running []*corev1.Pod) bool {
	want := ports(pod)
	if len(want) == 0 {
		return false
	}
	for _, p := range running {
		for _, have := range ports(p) {
			for _, w := range want {
				if w.port == have.port && w.proto == have.proto && (w.ip == have.ip || w.ip == "0.0.0.0" || have.ip == "0.0.0.0") {
					return true
				}
			}
		}
	}
	return false
}

// InsufficientResourcePrefix starts the reason of a pod refused for a
// resource the node has too little of (OutOfcpu, OutOfhugepages-2Mi, ...).
const InsufficientResourcePrefix = "OutOf"

// RejectedMessagePrefix starts the status message of a rejected pod; the
// rest is the handler's message.
const RejectedMessagePrefix = "Pod was rejected: "

// RejectedStatus is the status the kubelet gives a pod it rejects: Failed
// with the handler's reason and its message after RejectedMessagePrefix,
// and the pod's QoS class.
func RejectedStatus(pod *corev1.Pod, r Result) corev1.PodStatus {
	return corev1.PodStatus{
		QOSClass: resources.QOSClass(pod),
		Phase:    corev1.PodFailed,
		Reason:   r.Reason,
		Message:  RejectedMessagePrefix + r.Message,
	}
}
