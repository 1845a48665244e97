package kubeletconfig

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// sample is a defaulted configuration with every field microlet implements
// set, so Markdown can name the flags of each.
var sample = func() *kubeletv1beta1.KubeletConfiguration {
	kc := &kubeletv1beta1.KubeletConfiguration{
		StaticPodPath:                        "/etc/kubernetes/manifests",
		StaticPodURL:                         "http://127.0.0.1/pods",
		StaticPodURLHeader:                   map[string][]string{"A": {"b"}},
		TLSCertFile:                          "/tls.crt",
		TLSPrivateKeyFile:                    "/tls.key",
		TLSMinVersion:                        "VersionTLS12",
		TLSCipherSuites:                      []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"},
		PreloadedImagesVerificationAllowlist: []string{"registry.k8s.io/pause"},
		ClusterDomain:                        "cluster.local",
		ClusterDNS:                           []string{"10.96.0.10"},
		CgroupRoot:                           "/",
		EvictionHard:                         map[string]string{"memory.available": "100Mi"},
		EvictionSoft:                         map[string]string{"memory.available": "200Mi"},
		EvictionSoftGracePeriod:              map[string]string{"memory.available": "1m"},
		EvictionMinimumReclaim:               map[string]string{"memory.available": "0"},
		SystemReserved:                       map[string]string{"cpu": "100m"},
		KubeReserved:                         map[string]string{"cpu": "100m"},
		AllowedUnsafeSysctls:                 []string{"net.core.somaxconn"},
		RegisterWithTaints:                   []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectNoSchedule}},
		ContainerRuntimeEndpoint:             "unix:///run/containerd/containerd.sock",
		ImageServiceEndpoint:                 "unix:///run/containerd/containerd.sock",
		Authentication: kubeletv1beta1.KubeletAuthentication{
			X509: kubeletv1beta1.KubeletX509Authentication{ClientCAFile: "/ca.crt"},
		},
		ImageMaximumGCAge: metav1.Duration{Duration: 1},
	}
	SetDefaults(kc)
	kc.ResolverConfig = ptr.To("/etc/resolv.conf")
	return kc
}()
