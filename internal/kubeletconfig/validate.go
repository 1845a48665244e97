package kubeletconfig

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/blang/semver/v4"
	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	logsapi "k8s.io/component-base/logs/api/v1"
	// The kubelet binary registers the JSON log format; logging.format: json
	// is valid only where it is registered.
	_ "k8s.io/component-base/logs/json/register"
	metricsv1 "k8s.io/component-base/metrics/api/v1"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	"k8s.io/klog/v2"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"

	"github.com/microlet/microlet/internal/version"
)

// Validate checks a defaulted configuration with the kubelet's rules
// (ValidateKubeletConfiguration of Kubernetes v1.36.3, Linux) and returns
// every problem at once, each in the kubelet's words, as one aggregate error.
// It covers all of them: feature gates (names, locked gates, dependencies)
// with the kubelet's table of gates (FeatureGate), the fields of the top
// level, shutdown, swap, crash-loop back-off, taints, topology, node
// allocatable enforcement, hairpin mode, image credential verification and
// its allowlist patterns, reserved CPUs and memory, the hidden metrics
// version (of the kubelet release microlet reports, version.Kubernetes),
// logging and tracing (with component-base's own validation), MemoryQoS,
// NodeLogQuery, and the Linux checks (cgroup v1 host, user namespaces).
// As in the kubelet, featureGates that cannot be applied (an unknown gate, a
// locked one set against its lock, an unmet dependency) are the only error
// reported, since every other rule depends on the gates; of several unknown
// gates the library names the first it meets.
// The kubelet checks cpuManagerPolicyOptions only when its static CPU manager
// starts, not here, and neither does Validate.
func Validate(kc *kubeletv1beta1.KubeletConfiguration) error {
	g, err := gates(kc, klog.Background())
	if err != nil {
		return err
	}
	on := g.Enabled
	errs := g.Validate()
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
		if !on(gateCPUCFSQuotaPeriod) && q != 100*time.Millisecond {
			add("cpuCFSQuotaPeriod (--cpu-cfs-quota-period) %v requires feature gate CustomCPUCFSQuotaPeriod", *kc.CPUCFSQuotaPeriod)
		}
		if on(gateCPUCFSQuotaPeriod) && (q < time.Millisecond || q > time.Second) {
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
	if maxAge != 0 && !on(gateImageMaximumGCAge) {
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
	if kc.ServerTLSBootstrap && !on(gateRotateKubeletServerCertificate) {
		add("serverTLSBootstrap %v requires feature gate RotateKubeletServerCertificate", kc.ServerTLSBootstrap)
	}
	if kc.RunOnce {
		add("runOnce (--runOnce) %v, Runonce mode has been deprecated and should not be set", kc.RunOnce)
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
	if on(gateGracefulNodeShutdown) {
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
		if !on(gateGracefulNodeShutdownBasedOnPodPriority) {
			add("Specifying shutdownGracePeriodByPodPriority requires feature gate GracefulNodeShutdownBasedOnPodPriority")
		} else if sgp > 0 || sgpc > 0 {
			add("Cannot specify both shutdownGracePeriodByPodPriority and shutdownGracePeriod at the same time")
		}
	}
	if on(gateNodeSwap) {
		switch kc.MemorySwap.SwapBehavior {
		case "", "NoSwap", "LimitedSwap":
		default:
			add("memorySwap.swapBehavior %q must be one of: \"\", %q or %q", kc.MemorySwap.SwapBehavior, "LimitedSwap", "NoSwap")
		}
	} else if kc.MemorySwap != (kubeletv1beta1.MemorySwapConfiguration{}) {
		add("memorySwap.swapBehavior cannot be set when NodeSwap feature flag is disabled")
	}
	mcrp := kc.CrashLoopBackOff.MaxContainerRestartPeriod
	if on(gateKubeletCrashLoopBackOffMax) {
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
	errs = append(errs, validateImageCredentials(kc, on(gateKubeletEnsureSecretPulledImages))...)
	if kc.ReservedSystemCPUs != "" {
		if kc.SystemReservedCgroup != "" || kc.KubeReservedCgroup != "" {
			add("can't use reservedSystemCPUs (--reserved-cpus) with systemReservedCgroup (--system-reserved-cgroup) or kubeReservedCgroup (--kube-reserved-cgroup)")
		}
		if _, err := cpuset.Parse(kc.ReservedSystemCPUs); err != nil {
			add("unable to parse reservedSystemCPUs (--reserved-cpus) %v, error: %w", kc.ReservedSystemCPUs, err)
		}
	}
	errs = append(errs, validateReservedMemory(kc.ReservedMemory)...)
	if err := validateOS(kc); err != nil {
		errs = append(errs, err)
	}
	if err := metricsv1.ValidateShowHiddenMetricsVersionForKubeletBackwardCompatOnly(kubeletRelease(), kc.ShowHiddenMetricsForVersion); err != nil {
		errs = append(errs, err)
	}
	if fe := logsapi.Validate(&kc.Logging, g, field.NewPath("logging")); len(fe) > 0 {
		errs = append(errs, fe.ToAggregate().Errors()...)
	}
	if fe := tracingapi.ValidateTracingConfiguration(kc.Tracing, g, field.NewPath("tracing")); len(fe) > 0 {
		errs = append(errs, fe.ToAggregate().Errors()...)
	}
	if on(gateMemoryQoS) && kc.MemoryThrottlingFactor == nil {
		add("memoryThrottlingFactor is required when MemoryQoS feature flag is enabled")
	}
	if f := kc.MemoryThrottlingFactor; f != nil && (*f <= 0 || *f > 1.0) {
		add("memoryThrottlingFactor %v must be greater than 0 and less than or equal to 1.0", *f)
	}
	if !on(gateMemoryQoS) && kc.MemoryReservationPolicy == kubeletv1beta1.TieredReservationMemoryReservationPolicy {
		add("memoryReservationPolicy %q requires MemoryQoS feature gate to be enabled", kc.MemoryReservationPolicy)
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
	if logQuery := kc.EnableSystemLogQuery != nil && *kc.EnableSystemLogQuery; logQuery {
		if !on(gateNodeLogQuery) {
			add("NodeLogQuery feature gate is required for enableSystemLogQuery")
		}
		if kc.EnableSystemLogHandler == nil || !*kc.EnableSystemLogHandler {
			add("enableSystemLogHandler is required for enableSystemLogQuery")
		}
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

// kubeletRelease is version.Kubernetes as a semantic version: the release the
// kubelet's showHiddenMetricsForVersion check compares with (a kubelet binary
// uses its own build version).
func kubeletRelease() semver.Version {
	return semver.MustParse(strings.TrimPrefix(version.Kubernetes, "v"))
}

// validateImageCredentials is the kubelet's check of
// imagePullCredentialsVerificationPolicy and
// preloadedImagesVerificationAllowlist: with KubeletEnsureSecretPulledImages
// on, a known policy and valid allowlist patterns allowed only with
// NeverVerifyAllowlistedImages; with it off, neither field set.
func validateImageCredentials(kc *kubeletv1beta1.KubeletConfiguration, enabled bool) []error {
	const prefix = "invalid configuration: "
	policy, allowlist := kc.ImagePullCredentialsVerificationPolicy, kc.PreloadedImagesVerificationAllowlist
	var errs []error
	if !enabled {
		if policy != "" {
			errs = append(errs, fmt.Errorf(prefix+"`imagePullCredentialsVerificationPolicy` must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled"))
		}
		if len(allowlist) > 0 {
			errs = append(errs, fmt.Errorf(prefix+"`preloadedImagesVerificationAllowlist` must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled"))
		}
		return errs
	}
	switch policy {
	case kubeletv1beta1.NeverVerify, kubeletv1beta1.NeverVerifyPreloadedImages,
		kubeletv1beta1.NeverVerifyAllowlistedImages, kubeletv1beta1.AlwaysVerify:
	default:
		errs = append(errs, fmt.Errorf(prefix+"option %q specified for imagePullCredentialsVerificationPolicy. Valid options are %q, %q, %q or %q", policy,
			kubeletv1beta1.NeverVerify, kubeletv1beta1.NeverVerifyPreloadedImages, kubeletv1beta1.NeverVerifyAllowlistedImages, kubeletv1beta1.AlwaysVerify))
	}
	if len(allowlist) > 0 && policy != kubeletv1beta1.NeverVerifyAllowlistedImages {
		// The kubelet's wording, typo included.
		errs = append(errs, fmt.Errorf(prefix+"can't set `preloadedImagesVerificationAllowlist` if `imagePullCredentialsVertificationPolicy` is not %q", kubeletv1beta1.NeverVerifyAllowlistedImages))
		return errs
	}
	for _, p := range allowlist {
		if err := checkAllowlistPattern(p); err != nil {
			// Only the first bad pattern, as the kubelet.
			errs = append(errs, fmt.Errorf(prefix+"invalid image pattern in `preloadedImagesVerificationAllowlist`: %w", err))
			break
		}
	}
	return errs
}

// checkAllowlistPattern is the kubelet's rule for one allowlist entry: no
// surrounding spaces; either a prefix ending in "/*" with something before
// the slash, or an image name with neither tag nor digest; "*" nowhere else.
func checkAllowlistPattern(pattern string) error {
	if strings.TrimSpace(pattern) != pattern {
		return fmt.Errorf("leading/trailing spaces are not allowed: %s", pattern)
	}
	body, wildcard := strings.CutSuffix(pattern, "*")
	wildcard = wildcard && strings.HasSuffix(body, "/")
	if !wildcard {
		body = pattern
	}
	switch {
	case body == "":
		return fmt.Errorf("the supplied pattern is too short: %s", pattern)
	case strings.Contains(body, "*"):
		return fmt.Errorf("not a valid wildcard pattern, only patterns ending with '/*' are allowed: %s", pattern)
	case wildcard && body == "/":
		return fmt.Errorf("at least registry hostname is required")
	case wildcard:
		return nil
	}
	name, err := withoutTagDigest(body)
	if err != nil {
		return fmt.Errorf("failed to parse as an image name: %w", err)
	}
	if name != body {
		return fmt.Errorf("neither tag nor digest is accepted in an image reference: %s", pattern)
	}
	return nil
}

// withoutTagDigest strips the digest, then the tag, from image as written,
// refusing an image whose digest or tag is not where the kubelet expects it.
func withoutTagDigest(image string) (string, error) {
	ref, err := reference.Parse(image)
	if err != nil {
		return "", err
	}
	if d, ok := ref.(reference.Digested); ok {
		var found bool
		if image, found = strings.CutSuffix(image, "@"+d.Digest().String()); !found {
			return "", fmt.Errorf("digest was not specified last, this does not appear to be a valid image spec: %q", image)
		}
	}
	if t, ok := ref.(reference.Tagged); ok {
		var found bool
		if image, found = strings.CutSuffix(image, ":"+t.Tag()); !found {
			return "", fmt.Errorf("tag %q was not specified last (or before the digest), this does not appear to be a valid image spec: %q", t.Tag(), image)
		}
	}
	return image, nil
}

// validateReservedMemory is the kubelet's check of reservedMemory: per NUMA
// node, only memory and hugepages-<size> limits, none zero, none twice.
func validateReservedMemory(reserved []kubeletv1beta1.MemoryReservation) []error {
	var errs []error
	seen := map[int32]map[corev1.ResourceName]bool{}
	for _, r := range reserved {
		if seen[r.NumaNode] == nil {
			seen[r.NumaNode] = map[corev1.ResourceName]bool{}
		}
		for name, q := range r.Limits {
			if name != corev1.ResourceMemory && !strings.HasPrefix(string(name), corev1.ResourceHugePagesPrefix) {
				errs = append(errs, fmt.Errorf("invalid configuration: the limit type %q for NUMA node %d is not supported, only %v is accepted",
					name, r.NumaNode, []corev1.ResourceName{corev1.ResourceMemory, corev1.ResourceHugePagesPrefix + "<HugePageSize>"}))
			}
			if q.IsZero() {
				errs = append(errs, fmt.Errorf("invalid configuration: reserved memory may not be zero for NUMA node %d and resource %q", r.NumaNode, name))
			}
			if seen[r.NumaNode][name] {
				errs = append(errs, fmt.Errorf("invalid configuration: the reserved memory has a duplicate value for NUMA node %d and resource %q", r.NumaNode, name))
			}
			seen[r.NumaNode][name] = true
		}
	}
	return errs
}
