// Package manifest turns the bytes of a static-pod manifest (a file in the
// manifest directory, or the body of the manifest URL) into the v1 Pods the
// kubelet would produce from them: the API defaults, the static-pod defaults
// (name <name>-<node>, namespace default, spec.nodeName, the config.hash
// annotation, the NoExecute toleration for file pods, phase Pending) and a
// UID equal to the one upstream's pkg/kubelet/config computes for the same
// bytes on the same node.
//
//	pod, err := manifest.ParsePod(data, manifest.Source{NodeName: "n1", Location: "/etc/kubernetes/manifests/web.yaml", File: true})
//
// The UID is FNV-128a over a dump of the pod in the layout of Kubernetes'
// internal API type, which this module mirrors in package core (generated,
// see services/podconfig/gen) so it need not import k8s.io/kubernetes.
package manifest
