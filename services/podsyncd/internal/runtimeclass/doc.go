// Package runtimeclass resolves a pod's spec.runtimeClassName to the CRI
// runtime handler its sandbox runs with, from the node.k8s.io RuntimeClass
// objects a shared informer keeps, as the kubelet's runtimeclass manager
// does: no name is the runtime's default handler (""), a RuntimeClass that
// does not exist is an error (the pod's sandbox is not created, the pod
// stays Pending with a FailedCreatePodSandBox event, and it starts once the
// RuntimeClass appears).
//
// A node without an API server (standalone) has no RuntimeClasses: a nil
// *Classes resolves every pod to the default handler, as the kubelet does
// without a client.
package runtimeclass
