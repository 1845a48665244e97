package kubeletconfig

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	tracingapi "k8s.io/component-base/tracing/api/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// validate defaults kc and validates it as on a cgroup v2 host, returning
// the error text ("" when valid).
func validate(t *testing.T, kc *kubeletv1beta1.KubeletConfiguration) string {
	t.Helper()
	defer func(f func() bool) { cgroupV1 = f }(cgroupV1)
	cgroupV1 = func() bool { return false }
	SetDefaults(kc)
	if err := Validate(kc); err != nil {
		return err.Error()
	}
	return ""
}

func TestFeatureGate(t *testing.T) {
	g := FeatureGate()
	for name, want := range map[featuregate.Feature]bool{"NodeSwap": true, "MemoryQoS": false, "LoggingBetaOptions": true, "CustomCPUCFSQuotaPeriod": true} {
		if got := g.Enabled(name); got != want {
			t.Errorf("%s enabled = %v, want the kubelet's default %v", name, got, want)
		}
	}
	// Each call is a copy: setting a gate does not leak into the next.
	if err := g.SetFromMap(map[string]bool{"MemoryQoS": true}); err != nil {
		t.Fatal(err)
	}
	if FeatureGate().Enabled("MemoryQoS") {
		t.Error("MemoryQoS set on one copy is on in a new one")
	}
}

func TestValidateFeatureGates(t *testing.T) {
	for name, tc := range map[string]struct {
		gates map[string]bool
		want  string
	}{
		"unknown":      {map[string]bool{"NoSuchGate": true}, "unrecognized feature gate: NoSuchGate"},
		"locked":       {map[string]bool{"NodeSwap": false}, "cannot set feature gate NodeSwap to false, feature is locked to true"},
		"dependency":   {map[string]bool{"GracefulNodeShutdown": false}, "GracefulNodeShutdownBasedOnPodPriority is enabled, but depends on features that are disabled: [GracefulNodeShutdown]"},
		"known, valid": {map[string]bool{"MemoryQoS": true, "ContextualLogging": false}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			// The bad gates are the only error, as in the kubelet, even
			// with other problems in the file.
			kc := &kubeletv1beta1.KubeletConfiguration{FeatureGates: tc.gates, MaxPods: -1}
			got := validate(t, kc)
			if tc.want == "" {
				if strings.Contains(got, "feature gate") || !strings.Contains(got, "maxPods") {
					t.Errorf("err = %q, want only the maxPods error", got)
				}
				return
			}
			if !strings.Contains(got, tc.want) || strings.Contains(got, "maxPods") {
				t.Errorf("err = %q, want %q alone", got, tc.want)
			}
		})
	}
}

// TestGateByKubeletName: the CPU CFS quota period gate is named
// CustomCPUCFSQuotaPeriod in featureGates.
func TestGateByKubeletName(t *testing.T) {
	kc := &kubeletv1beta1.KubeletConfiguration{
		FeatureGates:      map[string]bool{"CustomCPUCFSQuotaPeriod": false},
		CPUCFSQuotaPeriod: ptr.To(metavDuration("50ms")),
	}
	if got := validate(t, kc); !strings.Contains(got, "requires feature gate CustomCPUCFSQuotaPeriod") {
		t.Errorf("err = %q", got)
	}
}

func TestValidateRemainingRulesAtOnce(t *testing.T) {
	kc := &kubeletv1beta1.KubeletConfiguration{
		RunOnce:                     true,
		ReservedSystemCPUs:          "0-x",
		ShowHiddenMetricsForVersion: "1.34",
		MemoryReservationPolicy:     kubeletv1beta1.TieredReservationMemoryReservationPolicy,
		ReservedMemory: []kubeletv1beta1.MemoryReservation{
			{NumaNode: 0, Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("0")}},
		},
		Logging:                                logsapi.LoggingConfiguration{Format: "yaml"},
		Tracing:                                &tracingapi.TracingConfiguration{Endpoint: ptr.To("http://collector:4317")},
		ImagePullCredentialsVerificationPolicy: kubeletv1beta1.NeverVerify,
		PreloadedImagesVerificationAllowlist:   []string{"registry.k8s.io/*"},
	}
	got := validate(t, kc)
	for _, want := range []string{
		"invalid configuration: runOnce (--runOnce) true, Runonce mode has been deprecated and should not be set",
		`invalid configuration: unable to parse reservedSystemCPUs (--reserved-cpus) 0-x, error: `,
		`invalid showHiddenMetricsForVersion: showHiddenMetricsForVersion: Invalid value: "1.34": must be omitted or have the value '1.35'`,
		`invalid configuration: memoryReservationPolicy "TieredReservation" requires MemoryQoS feature gate to be enabled`,
		`invalid configuration: the limit type "cpu" for NUMA node 0 is not supported, only [memory hugepages-<HugePageSize>] is accepted`,
		`invalid configuration: reserved memory may not be zero for NUMA node 0 and resource "memory"`,
		`logging.format: Invalid value: "yaml": Unsupported log format`,
		`tracing.endpoint: Invalid value: "http://collector:4317": unsupported scheme: http.`,
		"invalid configuration: can't set `preloadedImagesVerificationAllowlist` if `imagePullCredentialsVertificationPolicy` is not \"NeverVerifyAllowlistedImages\"",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("error lacks %q:\n%s", want, got)
		}
	}
}

func TestValidateRemainingRulesValid(t *testing.T) {
	kc := &kubeletv1beta1.KubeletConfiguration{
		FeatureGates:                map[string]bool{"MemoryQoS": true},
		ReservedSystemCPUs:          "0-1,3",
		ShowHiddenMetricsForVersion: "1.35",
		MemoryReservationPolicy:     kubeletv1beta1.TieredReservationMemoryReservationPolicy,
		ReservedMemory: []kubeletv1beta1.MemoryReservation{
			{NumaNode: 0, Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi"), "hugepages-2Mi": resource.MustParse("4Mi")}},
			{NumaNode: 1, Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}},
		},
		Logging:                                logsapi.LoggingConfiguration{Format: "json"},
		Tracing:                                &tracingapi.TracingConfiguration{Endpoint: ptr.To("unix:///run/otel.sock"), SamplingRatePerMillion: ptr.To[int32](1000000)},
		ImagePullCredentialsVerificationPolicy: kubeletv1beta1.NeverVerifyAllowlistedImages,
		PreloadedImagesVerificationAllowlist:   []string{"registry.k8s.io/*", "docker.io/library/busybox"},
	}
	if got := validate(t, kc); got != "" {
		t.Errorf("valid configuration refused: %s", got)
	}
}

func TestAllowlistPattern(t *testing.T) {
	for pattern, want := range map[string]string{
		"registry.k8s.io/*":          "",
		"localhost:5000/team/*":      "",
		"docker.io/library/busybox":  "",
		"busybox":                    "",
		"":                           "the supplied pattern is too short: ",
		" busybox":                   "leading/trailing spaces are not allowed:  busybox",
		"*":                          "not a valid wildcard pattern, only patterns ending with '/*' are allowed: *",
		"registry.k8s.io/*/pause":    "not a valid wildcard pattern, only patterns ending with '/*' are allowed: registry.k8s.io/*/pause",
		"/*":                         "at least registry hostname is required",
		"busybox:1.36":               "neither tag nor digest is accepted in an image reference: busybox:1.36",
		"Busybox":                    "failed to parse as an image name: repository name must be lowercase",
		"registry.k8s.io/pause:3.10": "neither tag nor digest is accepted in an image reference: registry.k8s.io/pause:3.10",
	} {
		err := checkAllowlistPattern(pattern)
		switch {
		case want == "" && err != nil:
			t.Errorf("%q refused: %v", pattern, err)
		case want != "" && (err == nil || err.Error() != want):
			t.Errorf("%q: err = %v, want %q", pattern, err, want)
		}
	}
}
