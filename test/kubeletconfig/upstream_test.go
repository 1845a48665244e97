package kubeletconfig

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	_ "unsafe" // go:linkname, for the kubelet's build version below

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	logsapi "k8s.io/component-base/logs/api/v1"
	// The kubelet binary registers the JSON log format.
	_ "k8s.io/component-base/logs/json/register"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	// The kubelet's command: its init functions register the logging and
	// metrics gates with the kubelet's feature gate, so that
	// utilfeature.DefaultFeatureGate here is the kubelet's.
	_ "k8s.io/kubernetes/cmd/kubelet/app"
	kubeletconfiginternal "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletscheme "k8s.io/kubernetes/pkg/kubelet/apis/config/scheme"
	upstreamdefaults "k8s.io/kubernetes/pkg/kubelet/apis/config/v1beta1"
	upstreamvalidation "k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
	"k8s.io/utils/ptr"

	ours "github.com/microlet/microlet/internal/kubeletconfig"
)

// kubeletBuildVersion is the version a binary of component-base reports
// (k8s.io/component-base/version.Get), which the kubelet's release build stamps
// with -ldflags -X; the kubelet's showHiddenMetricsForVersion rule compares
// with it. The test stamps it as the v1.36.3 kubelet's, the release microlet
// reports itself as (internal/version.Kubernetes), in place of the unstamped
// v0.0.0-master a test binary has.
//
//go:linkname kubeletBuildVersion k8s.io/component-base/version.dynamicGitVersion
var kubeletBuildVersion atomic.Value

func init() { kubeletBuildVersion.Store("v1.36.3") }

func d(s string) metav1.Duration {
	v, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return metav1.Duration{Duration: v}
}

// inputs are configurations as a file could give them, valid and not.
var inputs = map[string]*kubeletv1beta1.KubeletConfiguration{
	"empty": {},
	"conformance": {
		Address: "127.0.0.1", Port: 10250, HealthzPort: ptr.To[int32](0),
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: "/ca.crt"},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization:               kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		ContainerRuntimeEndpoint:    "unix:///run/x.sock",
		CgroupDriver:                "cgroupfs",
		CgroupRoot:                  "/microlet",
		FailCgroupV1:                ptr.To(false),
		PodLogsDir:                  "/tmp/node/logs",
		ImageGCHighThresholdPercent: ptr.To[int32](100),
		ImageGCLowThresholdPercent:  ptr.To[int32](99),
		EvictionHard:                map[string]string{"memory.available": "100Mi"},
	},
	"kubeadm": {
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: "/etc/kubernetes/pki/ca.crt"},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: ptr.To(true)},
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: ptr.To(false)},
		},
		Authorization:      kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
		ClusterDNS:         []string{"10.96.0.10"},
		ClusterDomain:      "cluster.local",
		StaticPodPath:      "/etc/kubernetes/manifests",
		RotateCertificates: true,
		HealthzBindAddress: "127.0.0.1",
		HealthzPort:        ptr.To[int32](10248),
		CgroupDriver:       "systemd",
		ResolverConfig:     ptr.To("/run/systemd/resolve/resolv.conf"),
	},
	"update frequency only":  {NodeStatusUpdateFrequency: d("4s")},
	"parallel pulls":         {MaxParallelImagePulls: ptr.To[int32](5)},
	"parallel pulls, serial": {MaxParallelImagePulls: ptr.To[int32](5), SerializeImagePulls: ptr.To(true)},
	"negative pids":          {PodPidsLimit: ptr.To[int64](-5)},
	"crashloop gate off":     {FeatureGates: map[string]bool{"KubeletCrashLoopBackOffMax": false}},
	"crashloop out of range": {CrashLoopBackOff: kubeletv1beta1.CrashLoopBackOffConfig{MaxContainerRestartPeriod: ptr.To(d("10m"))}},
	"ports":                  {Port: 70000, ReadOnlyPort: -1, HealthzPort: ptr.To[int32](65536)},
	"negatives": {
		MaxPods: -1, EventBurst: -1, EventRecordQPS: ptr.To[int32](-1), KubeAPIBurst: -2, KubeAPIQPS: ptr.To[int32](-2),
		RegistryBurst: -1, RegistryPullQPS: ptr.To[int32](-1), MaxOpenFiles: -1, PodsPerCore: -1,
		NodeStatusMaxImages: ptr.To[int32](-2), NodeLeaseDurationSeconds: -1, OOMScoreAdj: ptr.To[int32](2000),
		IPTablesDropBit: ptr.To[int32](40), IPTablesMasqueradeBit: ptr.To[int32](-1),
	},
	"image gc": {
		ImageGCHighThresholdPercent: ptr.To[int32](50), ImageGCLowThresholdPercent: ptr.To[int32](150),
		ImageMinimumGCAge: d("-1m"), ImageMaximumGCAge: d("30s"),
	},
	"shutdown": {ShutdownGracePeriod: d("500ms"), ShutdownGracePeriodCriticalPods: d("10s"),
		ShutdownGracePeriodByPodPriority: []kubeletv1beta1.ShutdownGracePeriodByPodPriority{{Priority: 1, ShutdownGracePeriodSeconds: 10}}},
	"topology and hairpin": {TopologyManagerPolicy: "x", TopologyManagerScope: "y", HairpinMode: "z"},
	"swap":                 {MemorySwap: kubeletv1beta1.MemorySwapConfiguration{SwapBehavior: "Lots"}},
	"taints": {RegisterWithTaints: []v1.Taint{
		{Key: "ok", Effect: v1.TaintEffectNoSchedule},
		{Key: "bad key!", Effect: v1.TaintEffectNoSchedule},
		{Key: "k", Effect: "Sometimes"},
	}},
	"enforce node allocatable": {EnforceNodeAllocatable: []string{"pods", "pods", "system-reserved", "system-reserved-compressible", "bogus"}, CgroupsPerQOS: ptr.To(false)},
	"none plus":                {EnforceNodeAllocatable: []string{"none", "pods"}},
	"system cgroups":           {SystemCgroups: "/system"},
	"logs": {ContainerLogMaxFiles: ptr.To[int32](1), ContainerLogMaxWorkers: ptr.To[int32](0),
		ContainerLogMonitorInterval: ptr.To(d("1s")), PodLogsDir: "relative/../logs"},
	"memory":       {MemoryThrottlingFactor: ptr.To(1.5), MemoryReservationPolicy: "Some"},
	"quota period": {CPUCFSQuotaPeriod: ptr.To(d("2s"))},

	// Feature gates. The kubelet's defaulting panics on gates it cannot
	// apply (unknown, locked, unmet dependency); see upstreamDefaults.
	"gates unknown":             {FeatureGates: map[string]bool{"NoSuchGate": true}},
	"gates locked":              {FeatureGates: map[string]bool{"NodeSwap": false, "NodeLogQuery": false}},
	"gates unmet dependency":    {FeatureGates: map[string]bool{"GracefulNodeShutdown": false}},
	"gates all alpha":           {FeatureGates: map[string]bool{"AllAlpha": true}},
	"gates all beta off":        {FeatureGates: map[string]bool{"AllBeta": false}, ShutdownGracePeriod: d("30s")},
	"gates logging alpha":       {FeatureGates: map[string]bool{"LoggingAlphaOptions": true}, FailCgroupV1: ptr.To(false)},
	"quota period gate off":     {FeatureGates: map[string]bool{"CustomCPUCFSQuotaPeriod": false}, CPUCFSQuotaPeriod: ptr.To(d("50ms"))},
	"shutdown gates off":        {FeatureGates: map[string]bool{"GracefulNodeShutdown": false, "GracefulNodeShutdownBasedOnPodPriority": false}, ShutdownGracePeriod: d("30s")},
	"run once":                  {RunOnce: true},
	"memory qos":                {FeatureGates: map[string]bool{"MemoryQoS": true}, MemoryReservationPolicy: "TieredReservation", FailCgroupV1: ptr.To(false)},
	"tiered without memory qos": {MemoryReservationPolicy: "TieredReservation"},
	"system log query":          {EnableSystemLogQuery: ptr.To(true), EnableSystemLogHandler: ptr.To(false)},

	// Image credential verification.
	"credentials gate off": {FeatureGates: map[string]bool{"KubeletEnsureSecretPulledImages": false},
		ImagePullCredentialsVerificationPolicy: kubeletv1beta1.AlwaysVerify, PreloadedImagesVerificationAllowlist: []string{"registry.k8s.io/*"}},
	"credentials bad policy":        {ImagePullCredentialsVerificationPolicy: "Sometimes"},
	"allowlist with another policy": {ImagePullCredentialsVerificationPolicy: kubeletv1beta1.NeverVerify, PreloadedImagesVerificationAllowlist: []string{"registry.k8s.io/*"}},
	"allowlist valid": {ImagePullCredentialsVerificationPolicy: kubeletv1beta1.NeverVerifyAllowlistedImages, FailCgroupV1: ptr.To(false),
		PreloadedImagesVerificationAllowlist: []string{"registry.k8s.io/*", "docker.io/library/busybox", "localhost:5000/a/b", "busybox"}},

	// Reserved CPUs and memory.
	"reserved cpus valid":   {ReservedSystemCPUs: "0-1,3", FailCgroupV1: ptr.To(false)},
	"reserved cpus invalid": {ReservedSystemCPUs: "0-x", SystemReservedCgroup: "/system"},
	"reserved cpus reverse": {ReservedSystemCPUs: "3-1"},
	"reserved memory": {ReservedMemory: []kubeletv1beta1.MemoryReservation{
		{NumaNode: 0, Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi"), "hugepages-2Mi": resource.MustParse("0"), v1.ResourceCPU: resource.MustParse("1")}},
		{NumaNode: 0, Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("2Gi")}},
		{NumaNode: 1, Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}},
	}},
	"reserved memory valid": {FailCgroupV1: ptr.To(false), ReservedMemory: []kubeletv1beta1.MemoryReservation{
		{NumaNode: 0, Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi"), "hugepages-1Gi": resource.MustParse("2Gi")}},
		{NumaNode: 1, Limits: v1.ResourceList{v1.ResourceMemory: resource.MustParse("1Gi")}},
	}},

	// The hidden metrics version: only the release before the kubelet's.
	"hidden metrics valid":         {ShowHiddenMetricsForVersion: "1.35", FailCgroupV1: ptr.To(false)},
	"hidden metrics too old":       {ShowHiddenMetricsForVersion: "1.34"},
	"hidden metrics not a version": {ShowHiddenMetricsForVersion: "latest"},

	// Logging (component-base's validation with the kubelet's gates).
	"logging json":           {Logging: logsapi.LoggingConfiguration{Format: "json"}, FailCgroupV1: ptr.To(false)},
	"logging json gate off":  {FeatureGates: map[string]bool{"LoggingBetaOptions": false}, Logging: logsapi.LoggingConfiguration{Format: "json"}},
	"logging unknown format": {Logging: logsapi.LoggingConfiguration{Format: "yaml"}},
	"logging fields": {Logging: logsapi.LoggingConfiguration{
		Format: "json", FlushFrequency: logsapi.TimeOrMetaDuration{Duration: d("-1s")}, Verbosity: 1 << 31,
		VModule: logsapi.VModuleConfiguration{{FilePattern: "", Verbosity: 1}, {FilePattern: "a=b", Verbosity: 1 << 31}},
		Options: logsapi.FormatOptions{JSON: logsapi.JSONOptions{OutputRoutingOptions: logsapi.OutputRoutingOptions{SplitStream: true, InfoBufferSize: resource.QuantityValue{Quantity: resource.MustParse("1Mi")}}}},
	}},
	"logging text alpha options": {Logging: logsapi.LoggingConfiguration{Options: logsapi.FormatOptions{Text: logsapi.TextOptions{OutputRoutingOptions: logsapi.OutputRoutingOptions{SplitStream: true}}}}},

	// Tracing.
	"tracing valid":             {FailCgroupV1: ptr.To(false), Tracing: &tracingapi.TracingConfiguration{Endpoint: ptr.To("localhost:4317"), SamplingRatePerMillion: ptr.To[int32](100)}},
	"tracing invalid":           {Tracing: &tracingapi.TracingConfiguration{Endpoint: ptr.To("http://collector:4317"), SamplingRatePerMillion: ptr.To[int32](-1)}},
	"tracing rate and endpoint": {Tracing: &tracingapi.TracingConfiguration{Endpoint: ptr.To("unix://%zz"), SamplingRatePerMillion: ptr.To[int32](2000000)}},
}

// badAllowlistPatterns are preloadedImagesVerificationAllowlist entries the
// kubelet refuses, one input each (it reports only the first bad one).
var badAllowlistPatterns = []string{
	" registry.k8s.io/*", "", "*", "/*", "registry.k8s.io/*/pause", "registry*/x", "busybox:1.36",
	"busybox@sha256:" + strings.Repeat("a", 64), "Busybox", "a//b",
}

// validInputs must pass validation (they set failCgroupV1: false, since the
// kubelet refuses a cgroup v1 host otherwise).
var validInputs = []string{
	"conformance", "gates logging alpha", "memory qos", "allowlist valid", "reserved cpus valid",
	"reserved memory valid", "hidden metrics valid", "logging json", "tracing valid",
}

// afterDefaults are changes made to an input after defaulting, for rules no
// input can reach through the defaults.
var afterDefaults = map[string]func(*kubeletv1beta1.KubeletConfiguration){
	"memory qos without throttling factor": func(kc *kubeletv1beta1.KubeletConfiguration) { kc.MemoryThrottlingFactor = nil },
}

func init() {
	for i, p := range badAllowlistPatterns {
		inputs[fmt.Sprintf("bad allowlist pattern %d %q", i, p)] = &kubeletv1beta1.KubeletConfiguration{
			ImagePullCredentialsVerificationPolicy: kubeletv1beta1.NeverVerifyAllowlistedImages,
			PreloadedImagesVerificationAllowlist:   []string{"registry.k8s.io/*", p},
		}
	}
	inputs["memory qos without throttling factor"] = &kubeletv1beta1.KubeletConfiguration{FeatureGates: map[string]bool{"MemoryQoS": true}}
}

// upstreamDefaults applies the kubelet's defaulting to a copy of in. The
// kubelet's defaulting panics on featureGates it cannot apply; for those
// inputs the result is nil and the panic message.
func upstreamDefaults(in *kubeletv1beta1.KubeletConfiguration) (out *kubeletv1beta1.KubeletConfiguration, panicked string) {
	out = in.DeepCopy()
	defer func() {
		if r := recover(); r != nil {
			out, panicked = nil, fmt.Sprint(r)
		}
	}()
	upstreamdefaults.SetDefaults_KubeletConfiguration(out)
	return out, ""
}

func TestDefaultsMatchUpstream(t *testing.T) {
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			got := in.DeepCopy()
			ours.SetDefaults(got)
			want, panicked := upstreamDefaults(in)
			if panicked != "" {
				// microlet defaults as with the gates at their defaults
				// (and Validate refuses the gates, as the kubelet would).
				t.Logf("the kubelet's defaulting panics: %s", panicked)
				noGates := in.DeepCopy()
				noGates.FeatureGates = nil
				if want, panicked = upstreamDefaults(noGates); panicked != "" {
					t.Fatalf("the kubelet's defaulting panics without featureGates too: %s", panicked)
				}
				want.FeatureGates = in.FeatureGates
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("defaults differ from the kubelet's (-kubelet +microlet):\n%s", diff)
			}
		})
	}
}

func toInternal(t *testing.T, in *kubeletv1beta1.KubeletConfiguration) *kubeletconfiginternal.KubeletConfiguration {
	t.Helper()
	scheme, _, err := kubeletscheme.NewSchemeAndCodecs()
	if err != nil {
		t.Fatal(err)
	}
	out := &kubeletconfiginternal.KubeletConfiguration{}
	if err := scheme.Convert(in, out, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

func messages(err error) []string {
	if err == nil {
		return nil
	}
	var out []string
	if agg, ok := err.(utilerrors.Aggregate); ok {
		for _, e := range agg.Errors() {
			out = append(out, e.Error())
		}
	} else {
		out = []string{err.Error()}
	}
	sort.Strings(out)
	return out
}

func TestValidationMatchesUpstream(t *testing.T) {
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			kc, panicked := upstreamDefaults(in)
			if panicked != "" {
				kc = in.DeepCopy()
				ours.SetDefaults(kc)
			}
			if f := afterDefaults[name]; f != nil {
				f(kc)
			}
			got := messages(ours.Validate(kc.DeepCopy()))
			want := messages(upstreamvalidation.ValidateKubeletConfiguration(toInternal(t, kc), utilfeature.DefaultFeatureGate))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("validation differs from the kubelet's (-kubelet +microlet):\n%s", diff)
			}
			if slices.Contains(validInputs, name) {
				if len(got) > 0 {
					t.Errorf("valid input refused: %s", strings.Join(got, "; "))
				}
			}
		})
	}
}
