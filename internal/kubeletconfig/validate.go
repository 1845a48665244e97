package kubeletconfig

import (
	"fmt"
	"path/filepath"
	"time"
	"unicode"

	corev1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Validate checks a defaulted configuration with the kubelet's rules
// (ValidateKubeletConfiguration of Kubernetes v1.36.3) and returns every
// problem at once, each in the kubelet's words, as one aggregate error. It
// covers the rules on fields of the top level, shutdown, swap, crash-loop
// back-off, taints, topology, node allocatable enforcement and hairpin mode;
// the rules that need the kubelet's internal packages (feature gate names,
// logging, tracing, reserved memory, image patterns, CPU manager options,
// reserved CPUs, hidden metrics version, feature-gate-only checks of MemoryQoS
// and NodeLogQuery)
// are not reproduced.
func Validate(kc *kubeletv1beta1.KubeletConfiguration) error {
	var errs []error
	add := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("invalid configuration: "+format, a...))
	}
	i32 := func(p *int32) int32 {
		if p == nil {
			return 0
		}
		return *p
	}
	inRange := func(v, lo, hi int) bool { return v >= lo && v <= hi }
	validPort := func(p int32) bool { return len(validation.IsValidPortNum(int(p))) == 0 }

	if kc.NodeLeaseDurationSeconds <= 0 {
		add("nodeLeaseDurationSeconds must be greater than 0")
	}
	if kc.SystemCgroups != "" && kc.CgroupRoot == "" {
		add("systemCgroups (--system-cgroups) was specified and cgroupRoot (--cgroup-root) was not specified")
	}
	if kc.EventBurst < 0 {
		add("eventBurst (--event-burst) %v must not be a negative number", kc.EventBurst)
	}
	if i32(kc.EventRecordQPS) < 0 {
		add("eventRecordQPS (--event-qps) %v must not be a negative number", i32(kc.EventRecordQPS))
	}
	if hp := i32(kc.HealthzPort); hp != 0 && !validPort(hp) {
		add("healthzPort (--healthz-port) %v must be between 1 and 65535, inclusive", hp)
	}
	if kc.CPUCFSQuotaPeriod != nil {
		q := kc.CPUCFSQuotaPeriod.Duration
		if !gate(kc, "CPUCFSQuotaPeriod") && q != 100*time.Millisecond {
			add("cpuCFSQuotaPeriod (--cpu-cfs-quota-period) %v requires feature gate CustomCPUCFSQuotaPeriod", *kc.CPUCFSQuotaPeriod)
		}
		if gate(kc, "CPUCFSQuotaPeriod") && (q < time.Millisecond || q > time.Second) {
			add("cpuCFSQuotaPeriod (--cpu-cfs-quota-period) %v must be between 1ms and 1sec, inclusive", *kc.CPUCFSQuotaPeriod)
		}
	}
	high, low := i32(kc.ImageGCHighThresholdPercent), i32(kc.ImageGCLowThresholdPercent)
	if !inRange(int(high), 0, 100) {
		add("imageGCHighThresholdPercent (--image-gc-high-threshold) %v must be between 0 and 100, inclusive", high)
	}
	if !inRange(int(low), 0, 100) {
		add("imageGCLowThresholdPercent (--image-gc-low-threshold) %v must be between 0 and 100, inclusive", low)
	}
	if low >= high {
		add("imageGCLowThresholdPercent (--image-gc-low-threshold) %v must be less than imageGCHighThresholdPercent (--image-gc-high-threshold) %v", low, high)
	}
	minAge, maxAge := kc.ImageMinimumGCAge.Duration, kc.ImageMaximumGCAge.Duration
	if maxAge != 0 && !gate(kc, "ImageMaximumGCAge") {
		add("ImageMaximumGCAge feature gate is required for Kubelet configuration option imageMaximumGCAge")
	}
	if minAge < 0 {
		add("imageMinimumGCAge %v must not be negative", minAge)
	}
	if maxAge < 0 {
		add("imageMaximumGCAge %v must not be negative", maxAge)
	}
	if maxAge > 0 && maxAge <= minAge {
		add("imageMaximumGCAge %v must be greater than imageMinimumGCAge %v", maxAge, minAge)
	}
	if b := i32(kc.IPTablesDropBit); !inRange(int(b), 0, 31) {
		add("iptablesDropBit (--iptables-drop-bit) %v must be between 0 and 31, inclusive", b)
	}
	if b := i32(kc.IPTablesMasqueradeBit); !inRange(int(b), 0, 31) {
		add("iptablesMasqueradeBit (--iptables-masquerade-bit) %v must be between 0 and 31, inclusive", b)
	}
	if kc.KubeAPIBurst < 0 {
		add("kubeAPIBurst (--kube-api-burst) %v must not be a negative number", kc.KubeAPIBurst)
	}
	if i32(kc.KubeAPIQPS) < 0 {
		add("kubeAPIQPS (--kube-api-qps) %v must not be a negative number", i32(kc.KubeAPIQPS))
	}
	if n := i32(kc.NodeStatusMaxImages); n < -1 {
		add("nodeStatusMaxImages (--node-status-max-images) %v must be -1 or greater", n)
	}
	if kc.MaxOpenFiles < 0 {
		add("maxOpenFiles (--max-open-files) %v must not be a negative number", kc.MaxOpenFiles)
	}
	if kc.MaxPods < 0 {
		add("maxPods (--max-pods) %v must not be a negative number", kc.MaxPods)
	}
	if o := i32(kc.OOMScoreAdj); !inRange(int(o), -1000, 1000) {
		add("oomScoreAdj (--oom-score-adj) %v must be between -1000 and 1000, inclusive", o)
	}
	if kc.PodsPerCore < 0 {
		add("podsPerCore (--pods-per-core) %v must not be a negative number", kc.PodsPerCore)
	}
	if !validPort(kc.Port) {
		add("port (--port) %v must be between 1 and 65535, inclusive", kc.Port)
	}
	if kc.ReadOnlyPort != 0 && !validPort(kc.ReadOnlyPort) {
		add("readOnlyPort (--read-only-port) %v must be between 0 and 65535, inclusive", kc.ReadOnlyPort)
	}
	if kc.RegistryBurst < 0 {
		add("registryBurst (--registry-burst) %v must not be a negative number", kc.RegistryBurst)
	}
	if i32(kc.RegistryPullQPS) < 0 {
		add("registryPullQPS (--registry-qps) %v must not be a negative number", i32(kc.RegistryPullQPS))
	}
	if kc.MaxParallelImagePulls != nil && *kc.MaxParallelImagePulls < 1 {
		add("maxParallelImagePulls %v must be a positive number", *kc.MaxParallelImagePulls)
	}
	if kc.SerializeImagePulls != nil && *kc.SerializeImagePulls && kc.MaxParallelImagePulls != nil && *kc.MaxParallelImagePulls > 1 {
		add("maxParallelImagePulls cannot be larger than 1 unless SerializeImagePulls (--serialize-image-pulls) is set to false")
	}
	if kc.ServerTLSBootstrap && !gate(kc, "RotateKubeletServerCertificate") {
		add("serverTLSBootstrap %v requires feature gate RotateKubeletServerCertificate", kc.ServerTLSBootstrap)
	}
	for _, t := range kc.RegisterWithTaints {
		if !validTaint(t) {
			errs = append(errs, fmt.Errorf("invalid taint: %v", t))
		}
		if t.TimeAdded != nil {
			add("taint.TimeAdded is not nil")
		}
	}
	switch kc.TopologyManagerPolicy {
	case kubeletv1beta1.NoneTopologyManagerPolicy, kubeletv1beta1.BestEffortTopologyManagerPolicy,
		kubeletv1beta1.RestrictedTopologyManagerPolicy, kubeletv1beta1.SingleNumaNodeTopologyManagerPolicy:
	default:
		add("topologyManagerPolicy (--topology-manager-policy) %q must be one of: %q", kc.TopologyManagerPolicy,
			[]string{kubeletv1beta1.NoneTopologyManagerPolicy, kubeletv1beta1.BestEffortTopologyManagerPolicy,
				kubeletv1beta1.RestrictedTopologyManagerPolicy, kubeletv1beta1.SingleNumaNodeTopologyManagerPolicy})
	}
	switch kc.TopologyManagerScope {
	case kubeletv1beta1.ContainerTopologyManagerScope, kubeletv1beta1.PodTopologyManagerScope:
	default:
		add("topologyManagerScope (--topology-manager-scope) %q must be one of: %q, or %q", kc.TopologyManagerScope,
			kubeletv1beta1.ContainerTopologyManagerScope, kubeletv1beta1.PodTopologyManagerScope)
	}
	sgp, sgpc := kc.ShutdownGracePeriod.Duration, kc.ShutdownGracePeriodCriticalPods.Duration
	if gate(kc, "GracefulNodeShutdown") {
		if sgpc > sgp {
			add("shutdownGracePeriodCriticalPods %v must be <= shutdownGracePeriod %v", kc.ShutdownGracePeriodCriticalPods, kc.ShutdownGracePeriod)
		}
		if sgp < 0 || (sgp > 0 && sgp < time.Second) {
			add("shutdownGracePeriod %v must be either zero or otherwise >= 1 sec", kc.ShutdownGracePeriod)
		}
		if sgpc < 0 || (sgpc > 0 && sgpc < time.Second) {
			add("shutdownGracePeriodCriticalPods %v must be either zero or otherwise >= 1 sec", kc.ShutdownGracePeriodCriticalPods)
		}
	} else if sgp > 0 || sgpc > 0 {
		add("specifying shutdownGracePeriod or shutdownGracePeriodCriticalPods requires feature gate GracefulNodeShutdown")
	}
	if len(kc.ShutdownGracePeriodByPodPriority) != 0 {
		if !gate(kc, "GracefulNodeShutdownBasedOnPodPriority") {
			add("Specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority")
		} else if sgp > 0 || sgpc > 0 {
			add("Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time")
		}
	}
	if gate(kc, "NodeSwap") {
		switch kc.MemorySwap.SwapBehavior {
		case "", "NoSwap", "LimitedSwap":
		default:
			add("memorySwap.swapBehavior %q must be one of: \"\", %q or %q", kc.MemorySwap.SwapBehavior, "LimitedSwap", "NoSwap")
		}
	} else if kc.MemorySwap != (kubeletv1beta1.MemorySwapConfiguration{}) {
		add("memorySwap.swapBehavior cannot be set when NodeSwap feature flag is disabled")
	}
	mcrp := kc.CrashLoopBackOff.MaxContainerRestartPeriod
	if gate(kc, "KubeletCrashLoopBackOffMax") {
		if mcrp == nil {
			add("FeatureGate KubeletCrashLoopBackOffMax is enabled, CrashLoopBackOff.MaxContainerRestartPeriod must be set")
		} else if ms := mcrp.Milliseconds(); ms < 1000 || ms > 300000 {
			add("CrashLoopBackOff.MaxContainerRestartPeriod (got: %v seconds) must be set between 1s and 300s", mcrp.Seconds())
		}
	} else if mcrp != nil {
		add("FeatureGate KubeletCrashLoopBackOffMax not enabled, CrashLoopBackOff.MaxContainerRestartPeriod must not be set")
	}
	errs = append(errs, validateEnforceNodeAllocatable(kc)...)
	switch kc.HairpinMode {
	case kubeletv1beta1.HairpinNone, kubeletv1beta1.HairpinVeth, kubeletv1beta1.PromiscuousBridge:
	default:
		add("option %q specified for hairpinMode (--hairpin-mode). Valid options are %q, %q or %q",
			kc.HairpinMode, kubeletv1beta1.HairpinNone, kubeletv1beta1.HairpinVeth, kubeletv1beta1.PromiscuousBridge)
	}
	if kc.ReservedSystemCPUs != "" && (len(kc.SystemReservedCgroup) > 0 || len(kc.KubeReservedCgroup) > 0) {
		add("can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)")
	}
	if f := kc.MemoryThrottlingFactor; f != nil && (*f <= 0 || *f > 1.0) {
		add("memoryThrottlingFactor %v must be greater than 0 and less than or equal to 1.0", *f)
	}
	switch kc.MemoryReservationPolicy {
	case kubeletv1beta1.NoneMemoryReservationPolicy, kubeletv1beta1.TieredReservationMemoryReservationPolicy:
	default:
		add("option %q specified for memoryReservationPolicy. Valid options are %q or %q", kc.MemoryReservationPolicy,
			kubeletv1beta1.NoneMemoryReservationPolicy, kubeletv1beta1.TieredReservationMemoryReservationPolicy)
	}
	if kc.ContainerRuntimeEndpoint == "" {
		add("the containerRuntimeEndpoint was not specified or empty")
	}
	if kc.EnableSystemLogQuery != nil && *kc.EnableSystemLogQuery && (kc.EnableSystemLogHandler == nil || !*kc.EnableSystemLogHandler) {
		add("enableSystemLogHandler is required for enableSystemLogQuery")
	}
	if i32(kc.ContainerLogMaxWorkers) < 1 {
		add("containerLogMaxWorkers must be greater than or equal to 1")
	}
	if kc.ContainerLogMonitorInterval == nil || kc.ContainerLogMonitorInterval.Seconds() < 3 {
		add("containerLogMonitorInterval must be a positive time duration greater than or equal to 3s")
	}
	if i32(kc.ContainerLogMaxFiles) <= 1 {
		add("containerLogMaxFiles must be greater than 1")
	}
	if kc.PodLogsDir == "" {
		add("podLogsDir was not specified")
	}
	if !filepath.IsAbs(kc.PodLogsDir) {
		add("pod logs path %q must be absolute path", kc.PodLogsDir)
	}
	if filepath.Clean(kc.PodLogsDir) != kc.PodLogsDir {
		add("pod logs path %q must be normalized", kc.PodLogsDir)
	}
	for _, c := range kc.PodLogsDir {
		if c > unicode.MaxASCII {
			// The kubelet's wording, typo included.
			add("pod logs path %q mut contains ASCII characters only", kc.PodLogsDir)
			break
		}
	}
	if err := validateOS(kc); err != nil {
		errs = append(errs, err)
	}
	return utilerrors.NewAggregate(errs)
}

// validTaint is the kubelet's check of a --register-with-taints entry: a
// qualified key, a label-value value and a known effect.
func validTaint(t corev1.Taint) bool {
	if len(validation.IsQualifiedName(t.Key)) > 0 {
		return false
	}
	if len(validation.IsValidLabelValue(t.Value)) > 0 {
		return false
	}
	switch t.Effect {
	case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		return true
	}
	return false
}

func validateEnforceNodeAllocatable(kc *kubeletv1beta1.KubeletConfiguration) []error {
	const (
		none   = "none"
		pods   = "pods"
		sys    = "system-reserved"
		sysC   = "system-reserved-compressible"
		kube   = "kube-reserved"
		kubeC  = "kube-reserved-compressible"
		prefix = "invalid configuration: "
	)
	var errs []error
	seen := map[string]bool{}
	for _, v := range kc.EnforceNodeAllocatable {
		seen[v] = true
	}
	if seen[sys] && seen[sysC] {
		errs = append(errs, fmt.Errorf(prefix+"both %q and %q cannot be specified together in enforceNodeAllocatable (--enforce-node-allocatable)", sys, sysC))
	}
	if seen[kube] && seen[kubeC] {
		errs = append(errs, fmt.Errorf(prefix+"both %q and %q cannot be specified together in enforceNodeAllocatable (--enforce-node-allocatable)", kube, kubeC))
	}
	dup := map[string]bool{}
	for _, v := range kc.EnforceNodeAllocatable {
		if dup[v] {
			errs = append(errs, fmt.Errorf(prefix+"duplicated enforcements %q in enforceNodeAllocatable (--enforce-node-allocatable)", v))
			continue
		}
		dup[v] = true
		switch v {
		case pods:
		case sys, sysC:
			if kc.SystemReservedCgroup == "" {
				errs = append(errs, fmt.Errorf(prefix+"systemReservedCgroup (--system-reserved-cgroup) must be specified when %q or %q included in enforceNodeAllocatable (--enforce-node-allocatable)", sys, sysC))
			}
		case kube, kubeC:
			if kc.KubeReservedCgroup == "" {
				errs = append(errs, fmt.Errorf(prefix+"kubeReservedCgroup (--kube-reserved-cgroup) must be specified when %q or %q included in enforceNodeAllocatable (--enforce-node-allocatable)", kube, kubeC))
			}
		case none:
			if len(kc.EnforceNodeAllocatable) > 1 {
				errs = append(errs, fmt.Errorf(prefix+"enforceNodeAllocatable (--enforce-node-allocatable) may not contain additional enforcements when %q is specified", none))
			}
			continue
		default:
			errs = append(errs, fmt.Errorf(prefix+"option %q specified for enforceNodeAllocatable (--enforce-node-allocatable). Valid options are %q, %q, %q, %q, %q or %q",
				v, pods, sys, sysC, kube, kubeC, none))
			continue
		}
		if kc.CgroupsPerQOS != nil && !*kc.CgroupsPerQOS {
			errs = append(errs, fmt.Errorf(prefix+"cgroupsPerQOS (--cgroups-per-qos) must be set to true when %q contained in enforceNodeAllocatable (--enforce-node-allocatable)", v))
		}
	}
	return errs
}
