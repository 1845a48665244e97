package kubeletconfig

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	kubeletconfiginternal "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletscheme "k8s.io/kubernetes/pkg/kubelet/apis/config/scheme"
	upstreamdefaults "k8s.io/kubernetes/pkg/kubelet/apis/config/v1beta1"
	upstreamvalidation "k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
	"k8s.io/utils/ptr"

	ours "github.com/microlet/microlet/internal/kubeletconfig"
)

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
}

func TestDefaultsMatchUpstream(t *testing.T) {
	for name, in := range inputs {
		t.Run(name, func(t *testing.T) {
			got, want := in.DeepCopy(), in.DeepCopy()
			ours.SetDefaults(got)
			upstreamdefaults.SetDefaults_KubeletConfiguration(want)
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
			kc := in.DeepCopy()
			upstreamdefaults.SetDefaults_KubeletConfiguration(kc)
			got := messages(ours.Validate(kc.DeepCopy()))
			want := messages(upstreamvalidation.ValidateKubeletConfiguration(toInternal(t, kc), utilfeature.DefaultFeatureGate))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("validation differs from the kubelet's (-kubelet +microlet):\n%s", diff)
			}
			if name == "conformance" { // the others are refused on a cgroup v1 host, as by the kubelet
				if len(got) > 0 {
					t.Errorf("valid input refused: %s", strings.Join(got, "; "))
				}
			}
		})
	}
}
