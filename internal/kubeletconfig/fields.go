package kubeletconfig

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Owners of fields: the microlet services, the supervisor (`microlet run`
// itself) and None for a field no part of microlet has a place for.
const (
	Supervisor  = "supervisor"
	PodConfig   = "podconfig"
	PodSyncd    = "podsyncd"
	NodeStatusd = "nodestatusd"
	NodeAPI     = "nodeapi"
	RuntimeShim = "runtime-shim"
	None        = "-"
)

// Field is one top-level field of KubeletConfiguration: its JSON name, the
// part of microlet that owns it and, when microlet implements it, the
// command-line arguments it becomes for each service. A field without Args
// is not implemented: set to a value other than the kubelet's default it is
// named in the start-up warning.
type Field struct {
	Path  string
	Owner string
	// Note says how microlet treats the field, for the docs table.
	Note string
	// Args returns the arguments per owner service (a field can feed more
	// than one); nil for a field microlet does not implement.
	Args func(kc *kubeletv1beta1.KubeletConfiguration) map[string][]string
}

// Implemented reports whether microlet implements the field.
func (f Field) Implemented() bool { return f.Args != nil }

func flag(name, v string) string { return "--" + name + "=" + v }

func one(svc, name string, get func(*kubeletv1beta1.KubeletConfiguration) (string, bool)) func(*kubeletv1beta1.KubeletConfiguration) map[string][]string {
	return to(get, target{svc, name})
}

type target struct{ svc, flag string }

func to(get func(*kubeletv1beta1.KubeletConfiguration) (string, bool), targets ...target) func(*kubeletv1beta1.KubeletConfiguration) map[string][]string {
	return func(kc *kubeletv1beta1.KubeletConfiguration) map[string][]string {
		v, ok := get(kc)
		if !ok {
			return nil
		}
		out := map[string][]string{}
		for _, t := range targets {
			out[t.svc] = append(out[t.svc], flag(t.flag, v))
		}
		return out
	}
}

func str(f func(*kubeletv1beta1.KubeletConfiguration) string) func(*kubeletv1beta1.KubeletConfiguration) (string, bool) {
	return func(kc *kubeletv1beta1.KubeletConfiguration) (string, bool) { v := f(kc); return v, v != "" }
}

func durv(f func(*kubeletv1beta1.KubeletConfiguration) metav1.Duration) func(*kubeletv1beta1.KubeletConfiguration) (string, bool) {
	return func(kc *kubeletv1beta1.KubeletConfiguration) (string, bool) {
		return f(kc).Duration.String(), true
	}
}

func durp(f func(*kubeletv1beta1.KubeletConfiguration) *metav1.Duration) func(*kubeletv1beta1.KubeletConfiguration) (string, bool) {
	return func(kc *kubeletv1beta1.KubeletConfiguration) (string, bool) {
		d := f(kc)
		if d == nil {
			return "", false
		}
		return d.Duration.String(), true
	}
}

func num[T int32 | int64 | float64](f func(*kubeletv1beta1.KubeletConfiguration) T) func(*kubeletv1beta1.KubeletConfiguration) (string, bool) {
	return func(kc *kubeletv1beta1.KubeletConfiguration) (string, bool) { return fmt.Sprint(f(kc)), true }
}

func nump[T int32 | int64](f func(*kubeletv1beta1.KubeletConfiguration) *T) func(*kubeletv1beta1.KubeletConfiguration) (string, bool) {
	return func(kc *kubeletv1beta1.KubeletConfiguration) (string, bool) {
		p := f(kc)
		if p == nil {
			return "", false
		}
		return fmt.Sprint(*p), true
	}
}

func boolp(f func(*kubeletv1beta1.KubeletConfiguration) *bool) func(*kubeletv1beta1.KubeletConfiguration) (string, bool) {
	return func(kc *kubeletv1beta1.KubeletConfiguration) (string, bool) {
		p := f(kc)
		if p == nil {
			return "", false
		}
		return strconv.FormatBool(*p), true
	}
}

func boolv(f func(*kubeletv1beta1.KubeletConfiguration) bool) func(*kubeletv1beta1.KubeletConfiguration) (string, bool) {
	return func(kc *kubeletv1beta1.KubeletConfiguration) (string, bool) { return strconv.FormatBool(f(kc)), true }
}

// kv formats a map as the services' key=value,... flags; an empty map is
// not passed (the service's default, the kubelet's, stays).
func kv(f func(*kubeletv1beta1.KubeletConfiguration) map[string]string) func(*kubeletv1beta1.KubeletConfiguration) (string, bool) {
	return func(kc *kubeletv1beta1.KubeletConfiguration) (string, bool) {
		m := f(kc)
		if len(m) == 0 {
			return "", false
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = k + "=" + m[k]
		}
		return strings.Join(parts, ","), true
	}
}

func list(f func(*kubeletv1beta1.KubeletConfiguration) []string) func(*kubeletv1beta1.KubeletConfiguration) (string, bool) {
	return func(kc *kubeletv1beta1.KubeletConfiguration) (string, bool) {
		l := f(kc)
		return strings.Join(l, ","), len(l) > 0
	}
}

type kc = kubeletv1beta1.KubeletConfiguration

// Fields is the table of every top-level KubeletConfiguration field, in the
// type's order. TestFieldsCoverType keeps it complete; docs/kubelet-config.md
// is generated from it (go generate ./internal/kubeletconfig).
var Fields = []Field{
	{Path: "enableServer", Owner: NodeAPI, Note: "nodeapi always serves"},
	{Path: "staticPodPath", Owner: PodConfig, Args: one(PodConfig, "manifest-dir", str(func(c *kc) string { return c.StaticPodPath }))},
	{Path: "podLogsDir", Owner: PodSyncd, Args: to(str(func(c *kc) string { return c.PodLogsDir }), target{PodSyncd, "pod-logs-dir"}, target{NodeAPI, "pod-logs-dir"})},
	{Path: "syncFrequency", Owner: PodSyncd, Args: one(PodSyncd, "resync-period", durv(func(c *kc) metav1.Duration { return c.SyncFrequency }))},
	{Path: "fileCheckFrequency", Owner: PodConfig, Args: one(PodConfig, "file-check-frequency", durv(func(c *kc) metav1.Duration { return c.FileCheckFrequency }))},
	{Path: "httpCheckFrequency", Owner: PodConfig, Args: one(PodConfig, "http-check-frequency", durv(func(c *kc) metav1.Duration { return c.HTTPCheckFrequency }))},
	{Path: "staticPodURL", Owner: PodConfig, Args: one(PodConfig, "manifest-url", str(func(c *kc) string { return c.StaticPodURL }))},
	{Path: "staticPodURLHeader", Owner: PodConfig, Args: one(PodConfig, "manifest-url-headers", kv(func(c *kc) map[string]string {
		out := map[string]string{}
		for k, v := range c.StaticPodURLHeader {
			out[k] = strings.Join(v, ",")
		}
		return out
	}))},
	{Path: "address", Owner: NodeAPI, Args: one(NodeAPI, "address", str(func(c *kc) string { return c.Address }))},
	{Path: "port", Owner: NodeAPI, Args: one(NodeAPI, "port", num(func(c *kc) int32 { return c.Port }))},
	{Path: "readOnlyPort", Owner: NodeAPI, Note: "plain HTTP on `address`, no authentication: `/healthz`, `/pods`, `/stats/summary`, `/metrics`, `/metrics/resource`, `/metrics/probes`, `/metrics/cadvisor`; the debugging paths answer 405 (docs/nodeapi.md)",
		Args: one(NodeAPI, "read-only-port", num(func(c *kc) int32 { return c.ReadOnlyPort }))},
	{Path: "tlsCertFile", Owner: NodeAPI, Args: one(NodeAPI, "tls-cert-file", str(func(c *kc) string { return c.TLSCertFile }))},
	{Path: "tlsPrivateKeyFile", Owner: NodeAPI, Args: one(NodeAPI, "tls-private-key-file", str(func(c *kc) string { return c.TLSPrivateKeyFile }))},
	{Path: "tlsCipherSuites", Owner: NodeAPI, Note: "the kubelet's names (k8s.io/component-base/cli/flag); ignored with a warning when tlsMinVersion is VersionTLS13",
		Args: one(NodeAPI, "tls-cipher-suites", list(func(c *kc) []string { return c.TLSCipherSuites }))},
	{Path: "tlsCurvePreferences", Owner: NodeAPI},
	{Path: "tlsMinVersion", Owner: NodeAPI, Note: "empty: VersionTLS12, Go's server default",
		Args: one(NodeAPI, "tls-min-version", str(func(c *kc) string { return c.TLSMinVersion }))},
	{Path: "rotateCertificates", Owner: Supervisor, Note: "with --bootstrap-kubeconfig the supervisor requests and renews the client certificate (internal/nodecreds)",
		Args: func(*kc) map[string][]string { return map[string][]string{} }},
	{Path: "serverTLSBootstrap", Owner: NodeAPI, Args: one(NodeAPI, "rotate-server-certificates", boolv(func(c *kc) bool { return c.ServerTLSBootstrap }))},
	{Path: "authentication", Owner: NodeAPI, Args: func(c *kc) map[string][]string {
		a := c.Authentication
		args := []string{}
		if a.X509.ClientCAFile != "" {
			args = append(args, flag("client-ca-file", a.X509.ClientCAFile))
		}
		if a.Anonymous.Enabled != nil {
			args = append(args, flag("anonymous-auth", strconv.FormatBool(*a.Anonymous.Enabled)))
		}
		if a.Webhook.Enabled != nil {
			args = append(args, flag("authentication-webhook", strconv.FormatBool(*a.Webhook.Enabled)))
		}
		args = append(args, flag("authentication-webhook-cache-ttl", a.Webhook.CacheTTL.Duration.String()))
		return map[string][]string{NodeAPI: args}
	}},
	{Path: "authorization", Owner: NodeAPI, Args: func(c *kc) map[string][]string {
		a := c.Authorization
		return map[string][]string{NodeAPI: {
			flag("authorization-mode", string(a.Mode)),
			flag("authorization-webhook-cache-authorized-ttl", a.Webhook.CacheAuthorizedTTL.Duration.String()),
			flag("authorization-webhook-cache-unauthorized-ttl", a.Webhook.CacheUnauthorizedTTL.Duration.String()),
		}}
	}},
	{Path: "registryPullQPS", Owner: PodSyncd},
	{Path: "registryBurst", Owner: PodSyncd},
	{Path: "imagePullCredentialsVerificationPolicy", Owner: PodSyncd, Args: one(PodSyncd, "image-pull-credentials-verification-policy", str(func(c *kc) string { return string(c.ImagePullCredentialsVerificationPolicy) }))},
	{Path: "preloadedImagesVerificationAllowlist", Owner: PodSyncd, Args: one(PodSyncd, "preloaded-images-verification-allowlist", list(func(c *kc) []string { return c.PreloadedImagesVerificationAllowlist }))},
	{Path: "eventRecordQPS", Owner: None},
	{Path: "eventBurst", Owner: None},
	{Path: "enableDebuggingHandlers", Owner: NodeAPI, Args: one(NodeAPI, "enable-debugging-handlers", boolp(func(c *kc) *bool { return c.EnableDebuggingHandlers }))},
	{Path: "enableContentionProfiling", Owner: None},
	{Path: "healthzPort", Owner: Supervisor, Note: "microlet's health is `microlet health` over the services' sockets"},
	{Path: "healthzBindAddress", Owner: Supervisor},
	{Path: "oomScoreAdj", Owner: Supervisor},
	{Path: "clusterDomain", Owner: PodSyncd, Args: one(PodSyncd, "cluster-domain", str(func(c *kc) string { return c.ClusterDomain }))},
	{Path: "clusterDNS", Owner: PodSyncd, Args: one(PodSyncd, "cluster-dns", list(func(c *kc) []string { return c.ClusterDNS }))},
	{Path: "streamingConnectionIdleTimeout", Owner: NodeAPI},
	{Path: "nodeStatusUpdateFrequency", Owner: NodeStatusd, Args: one(NodeStatusd, "node-status-update-frequency", durv(func(c *kc) metav1.Duration { return c.NodeStatusUpdateFrequency }))},
	{Path: "nodeStatusReportFrequency", Owner: NodeStatusd, Args: one(NodeStatusd, "node-status-report-frequency", durv(func(c *kc) metav1.Duration { return c.NodeStatusReportFrequency }))},
	{Path: "nodeLeaseDurationSeconds", Owner: NodeStatusd, Args: one(NodeStatusd, "node-lease-duration-seconds", num(func(c *kc) int32 { return c.NodeLeaseDurationSeconds }))},
	{Path: "imageMinimumGCAge", Owner: PodSyncd, Args: one(PodSyncd, "image-minimum-gc-age", durv(func(c *kc) metav1.Duration { return c.ImageMinimumGCAge }))},
	{Path: "imageMaximumGCAge", Owner: PodSyncd, Args: one(PodSyncd, "image-maximum-gc-age", durv(func(c *kc) metav1.Duration { return c.ImageMaximumGCAge }))},
	{Path: "imageGCHighThresholdPercent", Owner: PodSyncd, Args: one(PodSyncd, "image-gc-high-threshold-percent", nump(func(c *kc) *int32 { return c.ImageGCHighThresholdPercent }))},
	{Path: "imageGCLowThresholdPercent", Owner: PodSyncd, Args: one(PodSyncd, "image-gc-low-threshold-percent", nump(func(c *kc) *int32 { return c.ImageGCLowThresholdPercent }))},
	{Path: "volumeStatsAggPeriod", Owner: PodSyncd, Args: one(PodSyncd, "volume-stats-agg-period", durv(func(c *kc) metav1.Duration { return c.VolumeStatsAggPeriod }))},
	{Path: "kubeletCgroups", Owner: Supervisor},
	{Path: "systemCgroups", Owner: Supervisor},
	{Path: "cgroupRoot", Owner: PodSyncd, Args: one(PodSyncd, "cgroup-root", str(func(c *kc) string { return c.CgroupRoot }))},
	{Path: "cgroupsPerQOS", Owner: PodSyncd, Args: one(PodSyncd, "cgroups-per-qos", boolp(func(c *kc) *bool { return c.CgroupsPerQOS }))},
	{Path: "cgroupDriver", Owner: PodSyncd, Args: one(PodSyncd, "cgroup-driver", str(func(c *kc) string { return c.CgroupDriver }))},
	{Path: "cpuManagerPolicy", Owner: PodSyncd},
	{Path: "singleProcessOOMKill", Owner: PodSyncd},
	{Path: "cpuManagerPolicyOptions", Owner: PodSyncd},
	{Path: "cpuManagerReconcilePeriod", Owner: PodSyncd},
	{Path: "memoryManagerPolicy", Owner: PodSyncd},
	{Path: "topologyManagerPolicy", Owner: PodSyncd},
	{Path: "topologyManagerScope", Owner: PodSyncd},
	{Path: "topologyManagerPolicyOptions", Owner: PodSyncd},
	{Path: "qosReserved", Owner: PodSyncd},
	{Path: "runtimeRequestTimeout", Owner: PodSyncd, Args: to(durv(func(c *kc) metav1.Duration { return c.RuntimeRequestTimeout }), target{PodSyncd, "runtime-request-timeout"}, target{NodeAPI, "runtime-request-timeout"})},
	{Path: "hairpinMode", Owner: None, Note: "networking is the CNI plugin's (runtime-shim)"},
	{Path: "maxPods", Owner: NodeStatusd, Args: one(NodeStatusd, "max-pods", num(func(c *kc) int32 { return c.MaxPods }))},
	{Path: "podCIDR", Owner: NodeStatusd},
	{Path: "podPidsLimit", Owner: PodSyncd, Args: one(PodSyncd, "pod-pids-limit", nump(func(c *kc) *int64 { return c.PodPidsLimit }))},
	{Path: "resolvConf", Owner: PodSyncd, Args: func(c *kc) map[string][]string {
		if c.ResolverConfig == nil {
			return nil
		}
		return map[string][]string{PodSyncd: {flag("resolv-conf", *c.ResolverConfig)}}
	}},
	{Path: "runOnce", Owner: None},
	{Path: "cpuCFSQuota", Owner: PodSyncd, Args: one(PodSyncd, "cpu-cfs-quota", boolp(func(c *kc) *bool { return c.CPUCFSQuota }))},
	{Path: "cpuCFSQuotaPeriod", Owner: PodSyncd},
	{Path: "nodeStatusMaxImages", Owner: NodeStatusd, Args: one(NodeStatusd, "node-status-max-images", nump(func(c *kc) *int32 { return c.NodeStatusMaxImages }))},
	{Path: "maxOpenFiles", Owner: Supervisor},
	{Path: "contentType", Owner: None},
	{Path: "kubeAPIQPS", Owner: NodeStatusd, Args: one(NodeStatusd, "kube-api-qps", nump(func(c *kc) *int32 { return c.KubeAPIQPS }))},
	{Path: "kubeAPIBurst", Owner: NodeStatusd, Args: one(NodeStatusd, "kube-api-burst", num(func(c *kc) int32 { return c.KubeAPIBurst }))},
	{Path: "serializeImagePulls", Owner: PodSyncd},
	{Path: "maxParallelImagePulls", Owner: PodSyncd},
	{Path: "evictionHard", Owner: PodSyncd, Args: to(kv(func(c *kc) map[string]string { return c.EvictionHard }), target{PodSyncd, "eviction-hard"}, target{NodeStatusd, "eviction-hard"})},
	{Path: "evictionSoft", Owner: PodSyncd, Args: one(PodSyncd, "eviction-soft", kv(func(c *kc) map[string]string { return c.EvictionSoft }))},
	{Path: "evictionSoftGracePeriod", Owner: PodSyncd, Args: one(PodSyncd, "eviction-soft-grace-period", kv(func(c *kc) map[string]string { return c.EvictionSoftGracePeriod }))},
	{Path: "evictionPressureTransitionPeriod", Owner: PodSyncd, Args: one(PodSyncd, "eviction-pressure-transition-period", durv(func(c *kc) metav1.Duration { return c.EvictionPressureTransitionPeriod }))},
	{Path: "evictionMaxPodGracePeriod", Owner: PodSyncd, Args: one(PodSyncd, "eviction-max-pod-grace-period", num(func(c *kc) int32 { return c.EvictionMaxPodGracePeriod }))},
	{Path: "evictionMinimumReclaim", Owner: PodSyncd, Args: one(PodSyncd, "eviction-minimum-reclaim", kv(func(c *kc) map[string]string { return c.EvictionMinimumReclaim }))},
	{Path: "mergeDefaultEvictionSettings", Owner: PodSyncd},
	{Path: "podsPerCore", Owner: NodeStatusd},
	{Path: "enableControllerAttachDetach", Owner: NodeStatusd},
	{Path: "protectKernelDefaults", Owner: Supervisor},
	{Path: "makeIPTablesUtilChains", Owner: None},
	{Path: "iptablesMasqueradeBit", Owner: None},
	{Path: "iptablesDropBit", Owner: None},
	{Path: "featureGates", Owner: Supervisor, Note: "consulted by defaulting and validation only; microlet's services have no feature gates"},
	{Path: "failSwapOn", Owner: Supervisor},
	{Path: "memorySwap", Owner: PodSyncd},
	{Path: "containerLogMaxSize", Owner: PodSyncd, Args: one(PodSyncd, "container-log-max-size", str(func(c *kc) string { return c.ContainerLogMaxSize }))},
	{Path: "containerLogMaxFiles", Owner: PodSyncd, Args: one(PodSyncd, "container-log-max-files", nump(func(c *kc) *int32 { return c.ContainerLogMaxFiles }))},
	{Path: "containerLogMaxWorkers", Owner: PodSyncd, Args: one(PodSyncd, "container-log-max-workers", nump(func(c *kc) *int32 { return c.ContainerLogMaxWorkers }))},
	{Path: "containerLogMonitorInterval", Owner: PodSyncd, Args: one(PodSyncd, "container-log-monitor-interval", durp(func(c *kc) *metav1.Duration { return c.ContainerLogMonitorInterval }))},
	{Path: "configMapAndSecretChangeDetectionStrategy", Owner: PodSyncd},
	{Path: "systemReserved", Owner: NodeStatusd, Args: to(kv(func(c *kc) map[string]string { return c.SystemReserved }), target{NodeStatusd, "system-reserved"}, target{PodSyncd, "system-reserved"})},
	{Path: "kubeReserved", Owner: NodeStatusd, Args: to(kv(func(c *kc) map[string]string { return c.KubeReserved }), target{NodeStatusd, "kube-reserved"}, target{PodSyncd, "kube-reserved"})},
	{Path: "reservedSystemCPUs", Owner: PodSyncd},
	{Path: "showHiddenMetricsForVersion", Owner: None},
	{Path: "systemReservedCgroup", Owner: PodSyncd},
	{Path: "kubeReservedCgroup", Owner: PodSyncd},
	{Path: "enforceNodeAllocatable", Owner: PodSyncd},
	{Path: "allowedUnsafeSysctls", Owner: PodSyncd, Args: one(PodSyncd, "allowed-unsafe-sysctls", list(func(c *kc) []string { return c.AllowedUnsafeSysctls }))},
	{Path: "volumePluginDir", Owner: PodSyncd},
	{Path: "providerID", Owner: NodeStatusd},
	{Path: "kernelMemcgNotification", Owner: PodSyncd},
	{Path: "logging", Owner: Supervisor, Note: "microlet logs with log_level/log_format"},
	{Path: "enableSystemLogHandler", Owner: NodeAPI},
	{Path: "enableSystemLogQuery", Owner: NodeAPI},
	{Path: "shutdownGracePeriod", Owner: PodSyncd, Args: one(PodSyncd, "shutdown-grace-period", durv(func(c *kc) metav1.Duration { return c.ShutdownGracePeriod }))},
	{Path: "shutdownGracePeriodCriticalPods", Owner: PodSyncd, Args: one(PodSyncd, "shutdown-grace-period-critical-pods", durv(func(c *kc) metav1.Duration { return c.ShutdownGracePeriodCriticalPods }))},
	{Path: "shutdownGracePeriodByPodPriority", Owner: PodSyncd},
	{Path: "crashLoopBackOff", Owner: PodSyncd, Args: one(PodSyncd, "crashloop-backoff-max", durp(func(c *kc) *metav1.Duration { return c.CrashLoopBackOff.MaxContainerRestartPeriod }))},
	{Path: "reservedMemory", Owner: PodSyncd},
	{Path: "enableProfilingHandler", Owner: NodeAPI},
	{Path: "enableDebugFlagsHandler", Owner: NodeAPI},
	{Path: "seccompDefault", Owner: PodSyncd, Args: one(PodSyncd, "seccomp-default", boolp(func(c *kc) *bool { return c.SeccompDefault }))},
	{Path: "memoryThrottlingFactor", Owner: PodSyncd},
	{Path: "memoryReservationPolicy", Owner: PodSyncd},
	{Path: "registerWithTaints", Owner: NodeStatusd, Args: func(c *kc) map[string][]string {
		var args []string
		for _, t := range c.RegisterWithTaints {
			s := t.Key
			if t.Value != "" {
				s += "=" + t.Value
			}
			args = append(args, flag("register-with-taints", s+":"+string(t.Effect)))
		}
		if args == nil {
			return nil
		}
		return map[string][]string{NodeStatusd: args}
	}},
	{Path: "registerNode", Owner: NodeStatusd},
	{Path: "tracing", Owner: None},
	{Path: "localStorageCapacityIsolation", Owner: PodSyncd, Args: one(PodSyncd, "local-storage-capacity-isolation", boolp(func(c *kc) *bool { return c.LocalStorageCapacityIsolation }))},
	{Path: "containerRuntimeEndpoint", Owner: Supervisor, Note: "when set, an external CRI replaces runtime-shim; unset keeps runtime-shim (the kubelet defaults to containerd)",
		Args: one(Supervisor, "runtime-endpoint", str(func(c *kc) string { return c.ContainerRuntimeEndpoint }))},
	{Path: "imageServiceEndpoint", Owner: Supervisor, Args: one(Supervisor, "image-endpoint", str(func(c *kc) string { return c.ImageServiceEndpoint }))},
	{Path: "failCgroupV1", Owner: Supervisor, Note: "checked at start (validation), as the kubelet", Args: func(*kc) map[string][]string { return map[string][]string{} }},
	{Path: "userNamespaces", Owner: PodSyncd},
}

// jsonIndex maps each top-level JSON field name to its struct field index.
var jsonIndex = func() map[string]int {
	t := reflect.TypeFor[kubeletv1beta1.KubeletConfiguration]()
	out := map[string]int{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" {
			out[name] = i
		}
	}
	return out
}()

// Value returns the value of the top-level field named path in kc.
func Value(kc *kubeletv1beta1.KubeletConfiguration, path string) (any, bool) {
	i, ok := jsonIndex[path]
	if !ok {
		return nil, false
	}
	return reflect.ValueOf(kc).Elem().Field(i).Interface(), true
}

// Translation is a configuration turned into microlet's terms.
type Translation struct {
	// Supervisor are `microlet run` flags (--runtime-endpoint, ...).
	Supervisor []string
	// Args are the arguments per service, in Fields order.
	Args map[string][]string
	// Unimplemented are the fields microlet does not implement that are set
	// to something other than the kubelet's default, in Fields order.
	Unimplemented []string
}

// Translate turns a defaulted configuration into arguments. set is the
// configuration as read, before defaulting: containerRuntimeEndpoint is only
// passed on when the file (or a flag) set it, so that microlet keeps its own
// runtime-shim otherwise.
func Translate(kc, set *kubeletv1beta1.KubeletConfiguration) Translation {
	def := &kubeletv1beta1.KubeletConfiguration{}
	def.FeatureGates = kc.FeatureGates
	SetDefaults(def)
	tr := Translation{Args: map[string][]string{}}
	for _, f := range Fields {
		if !f.Implemented() {
			got, _ := Value(kc, f.Path)
			want, _ := Value(def, f.Path)
			if !equality.Semantic.DeepEqual(got, want) {
				tr.Unimplemented = append(tr.Unimplemented, f.Path)
			}
			continue
		}
		if f.Path == "containerRuntimeEndpoint" && set.ContainerRuntimeEndpoint == "" {
			continue
		}
		for svc, args := range f.Args(kc) {
			if svc == Supervisor {
				tr.Supervisor = append(tr.Supervisor, args...)
				continue
			}
			tr.Args[svc] = append(tr.Args[svc], args...)
		}
	}
	return tr
}

// Count returns how many fields microlet implements, of all.
func Count() (implemented, total int) {
	for _, f := range Fields {
		if f.Implemented() {
			implemented++
		}
	}
	return implemented, len(Fields)
}
