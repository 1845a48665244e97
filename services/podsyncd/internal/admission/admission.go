package admission

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	schedcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	"github.com/microlet/microlet/internal/podsource"
)

// Result is an admission decision.
type Result struct {
	Admit   bool
	Reason  string
	Message string
}

// Admit checks pod against node with the already admitted, still running pods.
func Admit(pod *corev1.Pod, node *corev1.Node, running []*corev1.Pod) Result {
	if node == nil {
		return Result{Admit: true}
	}
	// Resources first, as upstream orders them.
	if r, bad := resourcesFit(pod, node, running); bad {
		return r
	}
	if ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !ok {
		return fail("NodeAffinity", "node(s) didn't match Pod's node affinity/selector")
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

func fail(name, desc string) Result {
	return Result{Reason: name, Message: fmt.Sprintf("Predicate %s failed: %s", name, desc)}
}

func requests(pod *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
}

func resourcesFit(pod *corev1.Pod, node *corev1.Node, running []*corev1.Pod) (Result, bool) {
	alloc := node.Status.Allocatable
	if maxPods, ok := alloc[corev1.ResourcePods]; ok && int64(len(running)+1) > maxPods.Value() {
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
	for _, name := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		req, ok := want[name]
		if !ok || req.IsZero() {
			continue
		}
		capQ, ok := alloc[name]
		if !ok {
			continue
		}
		u := used[name]
		if value(name, req)+value(name, u) > value(name, capQ) {
			return insufficient(name, value(name, req), value(name, u), value(name, capQ)), true
		}
	}
	return Result{}, false
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
		Reason:  "OutOf" + string(name),
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
