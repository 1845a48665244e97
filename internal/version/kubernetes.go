package version

// Kubernetes is the Kubernetes release whose node behaviour microlet
// implements: the version of the k8s.io/api and k8s.io/client-go modules it
// is built with (v0.X.Y of those is release v1.X.Y). A Node reports it as
// status.nodeInfo.kubeletVersion, the field e2e, kubectl's version-skew
// checks and conformance tooling parse as the kubelet's release; microlet's
// own Version goes into the AnnotationVersion annotation instead.
// TestKubernetesFollowsGoMod keeps it equal to go.mod.
const Kubernetes = "v1.36.3"

// AnnotationVersion is the Node annotation holding microlet's own Version,
// since kubeletVersion holds Kubernetes.
const AnnotationVersion = "microlet.io/version"
