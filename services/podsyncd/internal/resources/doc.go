// Package resources maps a container's CPU and memory requests and limits to
// the CRI's Linux resources the way the kubelet does (CPU shares from the
// request, CFS quota from the limit, the memory limit), and holds the QoS
// rules that go with them: the pod's QoS class (k8s.io/kubectl's published
// copy of the API's rule), the OOM score adjustment by QoS class
// (pkg/kubelet/qos policy) and the pod's memory limit, which sizes
// memory-backed emptyDir volumes.
//
//	capacity, _ := resources.MemoryCapacity()
//	lr := resources.Container(pod, c, capacity) // shares, quota, period, memory, oom_score_adj
//	resources.QOSClass(pod)                     // Guaranteed, Burstable or BestEffort
package resources
