package kubeletconfig

import (
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// Values the kubelet's defaulting uses that k8s.io/kubelet does not publish
// (pkg/kubelet/apis/config/v1beta1 of Kubernetes v1.36.3).
const (
	DefaultPodLogsDir             = "/var/log/pods"
	DefaultVolumePluginDir        = "/usr/libexec/kubernetes/kubelet-plugins/volume/exec/"
	DefaultRuntimeEndpoint        = "unix:///run/containerd/containerd.sock"
	DefaultResolvConf             = "/etc/resolv.conf"
	DefaultMaxContainerBackOff    = 300 * time.Second
	DefaultMemoryThrottlingFactor = 0.9
	// kubeletOOMScoreAdj is the kubelet's own OOM score adjustment
	// (pkg/kubelet/qos).
	kubeletOOMScoreAdj = -999
)

func dur(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

// setDur sets *p to d when it is zero.
func setDur(p *metav1.Duration, d time.Duration) {
	if p.Duration == 0 {
		*p = dur(d)
	}
}

func setPtr[T any](p **T, v T) {
	if *p == nil {
		*p = ptr.To(v)
	}
}

func setZero[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// SetDefaults fills the unset fields of kc as the kubelet's
// SetDefaults_KubeletConfiguration does in Kubernetes v1.36.3 with its
// feature gates (FeatureGate) and kc's featureGates (KubeletCrashLoopBackOffMax
// and KubeletEnsureSecretPulledImages are on by default, so their fields are
// defaulted unless featureGates turns them off). The test module
// test/kubeletconfig compares it with upstream's on a table of inputs.
func SetDefaults(kc *kubeletv1beta1.KubeletConfiguration) {
	// featureGates that cannot be applied leave the gates at their defaults
	// here (the kubelet panics); Validate reports them.
	g, _ := gates(kc, logr.Discard())
	setPtr(&kc.EnableServer, true)
	setDur(&kc.SyncFrequency, time.Minute)
	setDur(&kc.FileCheckFrequency, 20*time.Second)
	setDur(&kc.HTTPCheckFrequency, 20*time.Second)
	setZero(&kc.Address, "0.0.0.0")
	setZero(&kc.Port, 10250)
	setPtr(&kc.Authentication.Anonymous.Enabled, false)
	setPtr(&kc.Authentication.Webhook.Enabled, true)
	setDur(&kc.Authentication.Webhook.CacheTTL, 2*time.Minute)
	setZero(&kc.Authorization.Mode, kubeletv1beta1.KubeletAuthorizationModeWebhook)
	setDur(&kc.Authorization.Webhook.CacheAuthorizedTTL, 5*time.Minute)
	setDur(&kc.Authorization.Webhook.CacheUnauthorizedTTL, 30*time.Second)
	setPtr(&kc.RegistryPullQPS, 5)
	setZero(&kc.RegistryBurst, 10)
	setPtr(&kc.EventRecordQPS, 50)
	setZero(&kc.EventBurst, 100)
	setPtr(&kc.EnableDebuggingHandlers, true)
	setPtr(&kc.HealthzPort, 10248)
	setZero(&kc.HealthzBindAddress, "127.0.0.1")
	setPtr(&kc.OOMScoreAdj, kubeletOOMScoreAdj)
	setDur(&kc.StreamingConnectionIdleTimeout, 4*time.Hour)
	// The report frequency follows an explicit update frequency, else 5m;
	// it is decided before the update frequency gets its own default.
	if kc.NodeStatusReportFrequency.Duration == 0 {
		if kc.NodeStatusUpdateFrequency.Duration == 0 {
			kc.NodeStatusReportFrequency = dur(5 * time.Minute)
		} else {
			kc.NodeStatusReportFrequency = kc.NodeStatusUpdateFrequency
		}
	}
	setDur(&kc.NodeStatusUpdateFrequency, 10*time.Second)
	setZero(&kc.NodeLeaseDurationSeconds, 40)
	setDur(&kc.ImageMinimumGCAge, 2*time.Minute)
	setPtr(&kc.ImageGCHighThresholdPercent, 85)
	setPtr(&kc.ImageGCLowThresholdPercent, 80)
	setDur(&kc.VolumeStatsAggPeriod, time.Minute)
	setPtr(&kc.CgroupsPerQOS, true)
	setZero(&kc.CgroupDriver, "cgroupfs")
	setZero(&kc.CPUManagerPolicy, "none")
	setDur(&kc.CPUManagerReconcilePeriod, 10*time.Second)
	setZero(&kc.MemoryManagerPolicy, kubeletv1beta1.NoneMemoryManagerPolicy)
	setZero(&kc.TopologyManagerPolicy, kubeletv1beta1.NoneTopologyManagerPolicy)
	setZero(&kc.TopologyManagerScope, kubeletv1beta1.ContainerTopologyManagerScope)
	setDur(&kc.RuntimeRequestTimeout, 2*time.Minute)
	setZero(&kc.HairpinMode, kubeletv1beta1.PromiscuousBridge)
	setZero(&kc.MaxPods, 110)
	if kc.PodPidsLimit == nil || *kc.PodPidsLimit < 0 {
		kc.PodPidsLimit = ptr.To[int64](-1)
	}
	setPtr(&kc.ResolverConfig, DefaultResolvConf)
	setPtr(&kc.CPUCFSQuota, true)
	setPtr(&kc.CPUCFSQuotaPeriod, dur(100*time.Millisecond))
	setPtr(&kc.NodeStatusMaxImages, 50)
	setZero(&kc.MaxOpenFiles, 1000000)
	setZero(&kc.ContentType, "application/vnd.kubernetes.protobuf")
	setPtr(&kc.KubeAPIQPS, 50)
	setZero(&kc.KubeAPIBurst, 100)
	if kc.SerializeImagePulls == nil {
		kc.SerializeImagePulls = ptr.To(kc.MaxParallelImagePulls == nil || *kc.MaxParallelImagePulls < 2)
	}
	setDur(&kc.EvictionPressureTransitionPeriod, 5*time.Minute)
	setPtr(&kc.MergeDefaultEvictionSettings, false)
	setPtr(&kc.EnableControllerAttachDetach, true)
	setPtr(&kc.MakeIPTablesUtilChains, true)
	setPtr(&kc.IPTablesMasqueradeBit, 14)
	setPtr(&kc.IPTablesDropBit, 15)
	setPtr(&kc.FailSwapOn, true)
	setZero(&kc.ContainerLogMaxSize, "10Mi")
	setPtr(&kc.ContainerLogMaxFiles, 5)
	setPtr(&kc.ContainerLogMaxWorkers, 1)
	setPtr(&kc.ContainerLogMonitorInterval, dur(10*time.Second))
	setZero(&kc.ConfigMapAndSecretChangeDetectionStrategy, kubeletv1beta1.WatchChangeDetectionStrategy)
	if kc.EnforceNodeAllocatable == nil {
		kc.EnforceNodeAllocatable = []string{"pods"}
	}
	setZero(&kc.VolumePluginDir, DefaultVolumePluginDir)
	logsapi.SetRecommendedLoggingConfiguration(&kc.Logging)
	setPtr(&kc.EnableSystemLogHandler, true)
	setPtr(&kc.EnableProfilingHandler, true)
	setPtr(&kc.EnableDebugFlagsHandler, true)
	setPtr(&kc.SeccompDefault, false)
	setPtr(&kc.FailCgroupV1, true)
	setPtr(&kc.MemoryThrottlingFactor, DefaultMemoryThrottlingFactor)
	setZero(&kc.MemoryReservationPolicy, kubeletv1beta1.NoneMemoryReservationPolicy)
	setPtr(&kc.RegisterNode, true)
	setPtr(&kc.LocalStorageCapacityIsolation, true)
	setZero(&kc.ContainerRuntimeEndpoint, DefaultRuntimeEndpoint)
	setZero(&kc.PodLogsDir, DefaultPodLogsDir)
	if g.Enabled(gateKubeletCrashLoopBackOffMax) {
		setPtr(&kc.CrashLoopBackOff.MaxContainerRestartPeriod, dur(DefaultMaxContainerBackOff))
	}
	if g.Enabled(gateKubeletEnsureSecretPulledImages) {
		setZero(&kc.ImagePullCredentialsVerificationPolicy, kubeletv1beta1.NeverVerifyPreloadedImages)
	}
}
