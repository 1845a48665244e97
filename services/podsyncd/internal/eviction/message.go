package eviction

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/microlet/microlet/internal/evictionapi"
)

// Reason is the pod status reason of an evicted or refused pod.
const Reason = "Evicted"

// The annotations of the Evicted event, the kubelet's keys.
const (
	OffendingContainersKey      = "offending_containers"
	OffendingContainersUsageKey = "offending_containers_usage"
	OffendingPodKey             = "offending_pod"
	OffendingPodUsageKey        = "offending_pod_usage"
	StarvedResourceKey          = "starved_resource"
)

// quantity formats n as the kubelet formats the signal's amounts: bytes in
// binary units, inodes and PIDs as plain numbers.
func quantity(n int64, res corev1.ResourceName) *resource.Quantity {
	if res == corev1.ResourceMemory || res == corev1.ResourceEphemeralStorage {
		return resource.NewQuantity(n, resource.BinarySI)
	}
	return resource.NewQuantity(n, resource.DecimalSI)
}

// thresholdQuantity is the kubelet's GetThresholdQuantity: an absolute
// threshold as written, a percentage as bytes of capacity.
func thresholdQuantity(t evictionapi.Threshold, capacity int64) *resource.Quantity {
	if t.Value.Quantity != nil {
		q := t.Value.Quantity.DeepCopy()
		return &q
	}
	return resource.NewQuantity(t.Value.Of(capacity), resource.BinarySI)
}

// message is the kubelet's evictionMessage: the starved resource, the
// threshold and what was available, then every container (and, with
// pod-level resources, the pod) using more than it requested.
func message(res corev1.ResourceName, pod *corev1.Pod, stats statsFunc, ts []evictionapi.Threshold, obs observations) (string, map[string]string) {
	var b strings.Builder
	ann := map[string]string{}
	fmt.Fprintf(&b, "The node was low on resource: %v. ", res)
	for _, t := range ts {
		if t.Signal.Resource() != res {
			continue
		}
		if o, ok := obs[t.Signal]; ok {
			fmt.Fprintf(&b, "Threshold quantity: %v, available: %v. ", thresholdQuantity(t, o.capacity), quantity(o.available, res))
			break
		}
	}
	ps, ok := stats(pod)
	if !ok {
		return b.String(), ann
	}
	if res == corev1.ResourceMemory && pod.Spec.Resources != nil && ps.Memory != nil {
		if req, ok := pod.Spec.Resources.Requests[res]; ok {
			usage := quantity(u64(ps.Memory.WorkingSetBytes), res)
			fmt.Fprintf(&b, "Pod %s was using %s, request is %s, has larger consumption of %v. ", pod.Name, usage, req.String(), res)
			ann[OffendingPodKey], ann[OffendingPodUsageKey] = pod.Name, usage.String()
		}
	}
	var names, usages []string
	for i := range ps.Containers {
		cs := &ps.Containers[i]
		c := specContainer(pod, cs.Name)
		if c == nil {
			continue
		}
		req := c.Resources.Requests[res]
		var usage *resource.Quantity
		switch res {
		case corev1.ResourceEphemeralStorage:
			if cs.Rootfs != nil && cs.Rootfs.UsedBytes != nil && cs.Logs != nil && cs.Logs.UsedBytes != nil {
				usage = quantity(u64(cs.Rootfs.UsedBytes)+u64(cs.Logs.UsedBytes), res)
			}
		case corev1.ResourceMemory:
			if cs.Memory != nil && cs.Memory.WorkingSetBytes != nil {
				usage = quantity(u64(cs.Memory.WorkingSetBytes), res)
			}
		}
		if usage != nil && usage.Cmp(req) > 0 {
			fmt.Fprintf(&b, "Container %s was using %s, request is %s, has larger consumption of %v. ", c.Name, usage, req.String(), res)
			names, usages = append(names, c.Name), append(usages, usage.String())
		}
	}
	ann[OffendingContainersKey] = strings.Join(names, ",")
	ann[OffendingContainersUsageKey] = strings.Join(usages, ",")
	ann[StarvedResourceKey] = string(res)
	return b.String(), ann
}

// specContainer finds a regular or init container by name; ephemeral
// containers have no requests and are never blamed.
func specContainer(pod *corev1.Pod, name string) *corev1.Container {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	return nil
}

// AdmissionMessage is the message of a pod refused under pressure.
func AdmissionMessage(conds []corev1.NodeConditionType) string {
	return fmt.Sprintf("The node had condition: %v. ", conds)
}
