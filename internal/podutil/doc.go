// Package podutil is the one home of the pod predicates more than one
// service asks, with the kubelet's semantics: whether an init container is
// a sidecar (upstream's IsRestartableInitContainer), whether a pod is
// critical or node-critical (pkg/kubelet/types IsCriticalPod,
// IsNodeCriticalPod) with scheduling's priority constants, and the
// ContainersReady and Ready conditions as the kubelet generates them
// (pkg/kubelet/status, with its exact reasons and messages). None of these
// is exported by a published Kubernetes library (k8s.io/api,
// component-helpers, kubelet, kubectl); where one is, use it instead.
//
// Where a pod came from (static, mirror) is podsource's vocabulary, which
// IsCritical builds on.
//
//	cr := podutil.ContainersReadyCondition(pod, &status)
//	ready := podutil.ReadyCondition(pod, cr, status.Conditions)
package podutil
