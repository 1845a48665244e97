package kubeletconfig

import (
	"strings"
	"sync"

	"github.com/go-logr/logr"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/component-base/featuregate"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/microlet/microlet/internal/version"
)

// The gates the defaulting and validation consult, by the kubelet's names.
const (
	gateCPUCFSQuotaPeriod                      featuregate.Feature = "CustomCPUCFSQuotaPeriod"
	gateGracefulNodeShutdown                   featuregate.Feature = "GracefulNodeShutdown"
	gateGracefulNodeShutdownBasedOnPodPriority featuregate.Feature = "GracefulNodeShutdownBasedOnPodPriority"
	gateImageMaximumGCAge                      featuregate.Feature = "ImageMaximumGCAge"
	gateKubeletCrashLoopBackOffMax             featuregate.Feature = "KubeletCrashLoopBackOffMax"
	gateKubeletEnsureSecretPulledImages        featuregate.Feature = "KubeletEnsureSecretPulledImages"
	gateMemoryQoS                              featuregate.Feature = "MemoryQoS"
	gateNodeLogQuery                           featuregate.Feature = "NodeLogQuery"
	gateNodeSwap                               featuregate.Feature = "NodeSwap"
	gateRotateKubeletServerCertificate         featuregate.Feature = "RotateKubeletServerCertificate"
)

// baseGate is the kubelet's feature gate with every gate at its default,
// built once from the generated table.
var baseGate = sync.OnceValue(func() featuregate.MutableVersionedFeatureGate {
	// The kubelet's gate emulates its own release, MAJOR.MINOR of
	// version.Kubernetes, and is compatible down to the release before.
	v := utilversion.MustParse(strings.TrimPrefix(version.Kubernetes, "v"))
	g := featuregate.NewVersionedFeatureGate(utilversion.MajorMinor(v.Major(), v.Minor()))
	if err := g.AddVersioned(kubeletGateSpecs); err != nil {
		panic("kubeletconfig: the generated feature gate table: " + err.Error())
	}
	if err := g.AddDependencies(kubeletGateDependencies); err != nil {
		panic("kubeletconfig: the generated feature gate dependencies: " + err.Error())
	}
	return g
})

// FeatureGate returns a new copy of the kubelet's feature gate as the
// kubelet of version.Kubernetes has it before reading its configuration:
// every gate it knows (its own, client-go's, the apiserver library's and the
// logging, metrics and zpages gates of component-base), each with the specs
// of every release, their dependencies, and the kubelet's emulation version.
// The table is generated from the kubelet itself
// (zz_generated_featuregates.go, test/kubeletconfig/cmd/kubeletgates), and
// the test/kubeletconfig module fails when it drifts.
func FeatureGate() featuregate.MutableVersionedFeatureGate {
	return baseGate().DeepCopy()
}

// gates returns the kubelet's feature gate with kc's featureGates applied,
// logging the library's warnings (a GA or deprecated gate set) to logger, and
// the error of applying them. On error the gate keeps its defaults, as the
// library leaves it.
func gates(kc *kubeletv1beta1.KubeletConfiguration, logger logr.Logger) (featuregate.MutableVersionedFeatureGate, error) {
	g := FeatureGate()
	return g, g.(featuregate.MutableFeatureGateWithLogger).SetFromMapWithLogger(logger, kc.FeatureGates)
}
