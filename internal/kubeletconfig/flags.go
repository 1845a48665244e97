package kubeletconfig

import (
	_ "embed" // kubelet_flags.txt
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cliflag "k8s.io/component-base/cli/flag"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// kubeletFlagList is every flag of the kubelet v1.36.3, one a line, written
// by test/kubeletconfig/cmd/kubeletflags (make generate).
//
//go:embed kubelet_flags.txt
var kubeletFlagList string

// KubeletFlags returns the names of all the kubelet's flags.
func KubeletFlags() map[string]bool {
	out := map[string]bool{}
	for _, l := range strings.Split(kubeletFlagList, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			out[l] = true
		}
	}
	return out
}

// Flags are the kubelet's command-line flags that are not fields of
// KubeletConfiguration, as `microlet run` takes them next to a
// KubeletConfiguration file.
type Flags struct {
	Kubeconfig             string
	BootstrapKubeconfig    string
	CertDir                string
	RootDir                string
	HostnameOverride       string
	NodeIP                 string
	NodeLabels             map[string]string
	CloudProvider          string
	PodInfraContainerImage string
	Verbosity              int
}

// AddFlags binds the kubelet flags microlet supports to fs: those of f and
// the configuration fields the kubelet also takes as (deprecated) flags,
// written into kc. Call it after the file was decoded into kc: each flag's
// default is kc's value, so a flag given on the command line overrides the
// file and an absent one leaves it, as in the kubelet.
func AddFlags(fs *pflag.FlagSet, f *Flags, kc *kubeletv1beta1.KubeletConfiguration) {
	fs.StringVar(&f.Kubeconfig, "kubeconfig", f.Kubeconfig, "path to the kubeconfig of the API server")
	fs.StringVar(&f.BootstrapKubeconfig, "bootstrap-kubeconfig", f.BootstrapKubeconfig, "kubeconfig with a bootstrap credential, used to get the client certificate written to --kubeconfig")
	fs.StringVar(&f.CertDir, "cert-dir", f.CertDir, "directory of the node's certificates")
	fs.StringVar(&f.RootDir, "root-dir", f.RootDir, "microlet's state directory (microlet's --data-dir)")
	fs.StringVar(&f.HostnameOverride, "hostname-override", f.HostnameOverride, "the node's name instead of the hostname")
	fs.StringVar(&f.NodeIP, "node-ip", f.NodeIP, "IP address(es) of the node, comma-separated, at most one per family")
	fs.Var(cliflag.NewMapStringString(&f.NodeLabels), "node-labels", "labels to register the node with, key=value,...")
	fs.StringVar(&f.CloudProvider, "cloud-provider", f.CloudProvider, `"external" or empty`)
	fs.StringVar(&f.PodInfraContainerImage, "pod-infra-container-image", f.PodInfraContainerImage, "accepted for compatibility; as in the kubelet the sandbox image is the runtime's")
	fs.IntVarP(&f.Verbosity, "v", "v", f.Verbosity, "log verbosity: 0-3 info, 4 and above debug")

	// Configuration fields as flags.
	fs.StringVar(&kc.StaticPodPath, "pod-manifest-path", kc.StaticPodPath, "staticPodPath")
	fs.StringVar(&kc.StaticPodURL, "manifest-url", kc.StaticPodURL, "staticPodURL")
	fs.StringVar(&kc.Address, "address", kc.Address, "address")
	fs.Int32Var(&kc.Port, "port", kc.Port, "port")
	fs.Int32Var(&kc.ReadOnlyPort, "read-only-port", kc.ReadOnlyPort, "readOnlyPort")
	fs.StringVar(&kc.TLSCertFile, "tls-cert-file", kc.TLSCertFile, "tlsCertFile")
	fs.StringVar(&kc.TLSPrivateKeyFile, "tls-private-key-file", kc.TLSPrivateKeyFile, "tlsPrivateKeyFile")
	fs.StringSliceVar(&kc.TLSCipherSuites, "tls-cipher-suites", kc.TLSCipherSuites, "tlsCipherSuites")
	fs.StringVar(&kc.TLSMinVersion, "tls-min-version", kc.TLSMinVersion, "tlsMinVersion")
	fs.BoolVar(&kc.RotateCertificates, "rotate-certificates", kc.RotateCertificates, "rotateCertificates")
	fs.BoolVar(&kc.ServerTLSBootstrap, "rotate-server-certificates", kc.ServerTLSBootstrap, "serverTLSBootstrap")
	fs.StringVar(&kc.Authentication.X509.ClientCAFile, "client-ca-file", kc.Authentication.X509.ClientCAFile, "authentication.x509.clientCAFile")
	fs.Var(boolPtr{&kc.Authentication.Anonymous.Enabled}, "anonymous-auth", "authentication.anonymous.enabled")
	fs.Var(boolPtr{&kc.Authentication.Webhook.Enabled}, "authentication-token-webhook", "authentication.webhook.enabled")
	fs.Var((*modeValue)(&kc.Authorization.Mode), "authorization-mode", "authorization.mode")
	fs.StringVar(&kc.ClusterDomain, "cluster-domain", kc.ClusterDomain, "clusterDomain")
	fs.StringSliceVar(&kc.ClusterDNS, "cluster-dns", kc.ClusterDNS, "clusterDNS")
	fs.Var(stringPtr{&kc.ResolverConfig}, "resolv-conf", "resolvConf")
	fs.Int32Var(&kc.MaxPods, "max-pods", kc.MaxPods, "maxPods")
	fs.StringVar(&kc.CgroupDriver, "cgroup-driver", kc.CgroupDriver, "cgroupDriver")
	fs.StringVar(&kc.CgroupRoot, "cgroup-root", kc.CgroupRoot, "cgroupRoot")
	fs.Var(boolPtr{&kc.CgroupsPerQOS}, "cgroups-per-qos", "cgroupsPerQOS")
	fs.Var(boolPtr{&kc.FailSwapOn}, "fail-swap-on", "failSwapOn")
	fs.Var(boolPtr{&kc.RegisterNode}, "register-node", "registerNode")
	fs.Var(&taintsValue{p: &kc.RegisterWithTaints}, "register-with-taints", "registerWithTaints, key=value:Effect,...")
	fs.StringVar(&kc.ProviderID, "provider-id", kc.ProviderID, "providerID")
	fs.StringVar(&kc.ContainerRuntimeEndpoint, "container-runtime-endpoint", kc.ContainerRuntimeEndpoint, "containerRuntimeEndpoint")
	fs.StringVar(&kc.ImageServiceEndpoint, "image-service-endpoint", kc.ImageServiceEndpoint, "imageServiceEndpoint")
	fs.Var(cliflag.NewLangleSeparatedMapStringString(&kc.EvictionHard), "eviction-hard", "evictionHard, signal<quantity,...")
	fs.Var(cliflag.NewMapStringString(&kc.KubeReserved), "kube-reserved", "kubeReserved")
	fs.Var(cliflag.NewMapStringString(&kc.SystemReserved), "system-reserved", "systemReserved")
	fs.Var(cliflag.NewMapStringBool(&kc.FeatureGates), "feature-gates", "featureGates")
	for _, d := range []struct {
		p    *metav1.Duration
		name string
	}{
		{&kc.SyncFrequency, "sync-frequency"},
		{&kc.FileCheckFrequency, "file-check-frequency"},
		{&kc.HTTPCheckFrequency, "http-check-frequency"},
		{&kc.NodeStatusUpdateFrequency, "node-status-update-frequency"},
		{&kc.RuntimeRequestTimeout, "runtime-request-timeout"},
		{&kc.ImageMinimumGCAge, "minimum-image-ttl-duration"},
	} {
		fs.DurationVar(&d.p.Duration, d.name, d.p.Duration, "configuration field as a flag")
	}
}

// boolPtr is a flag on a *bool field.
type boolPtr struct{ p **bool }

func (b boolPtr) String() string {
	if *b.p == nil {
		return ""
	}
	return strconv.FormatBool(**b.p)
}
func (b boolPtr) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	*b.p = &v
	return nil
}
func (b boolPtr) Type() string     { return "bool" }
func (b boolPtr) IsBoolFlag() bool { return true }

// stringPtr is a flag on a *string field.
type stringPtr struct{ p **string }

func (s stringPtr) String() string {
	if *s.p == nil {
		return ""
	}
	return **s.p
}
func (s stringPtr) Set(v string) error { *s.p = &v; return nil }
func (s stringPtr) Type() string       { return "string" }

type modeValue kubeletv1beta1.KubeletAuthorizationMode

func (m *modeValue) String() string     { return string(*m) }
func (m *modeValue) Set(s string) error { *m = modeValue(s); return nil }
func (m *modeValue) Type() string       { return "string" }

// taintsValue is --register-with-taints: key[=value]:Effect, comma-separated;
// the first use replaces the file's list.
type taintsValue struct {
	p   *[]corev1.Taint
	set bool
}

func (t *taintsValue) String() string {
	parts := make([]string, 0, len(*t.p))
	for _, x := range *t.p {
		parts = append(parts, x.ToString())
	}
	return strings.Join(parts, ",")
}

func (t *taintsValue) Set(s string) error {
	if !t.set {
		*t.p = nil
		t.set = true
	}
	for _, spec := range strings.Split(s, ",") {
		if spec = strings.TrimSpace(spec); spec == "" {
			continue
		}
		kv, effect, ok := strings.Cut(spec, ":")
		if !ok || effect == "" {
			return fmt.Errorf("invalid taint spec: %v", spec)
		}
		k, v, _ := strings.Cut(kv, "=")
		*t.p = append(*t.p, corev1.Taint{Key: k, Value: v, Effect: corev1.TaintEffect(effect)})
	}
	return nil
}
func (t *taintsValue) Type() string { return "mapStringString" }

// CheckArgs reports the first flag in args that fs does not define: a
// kubelet flag microlet lacks is named as such, anything else is unknown.
func CheckArgs(fs *pflag.FlagSet, args []string) error {
	kubelet := KubeletFlags()
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return nil
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		var f *pflag.Flag
		if strings.HasPrefix(a, "--") {
			f = fs.Lookup(name)
		} else {
			f = fs.ShorthandLookup(name[:1])
		}
		if f != nil || name == "help" || name == "h" {
			continue
		}
		if kubelet[name] {
			return fmt.Errorf("kubelet flag --%s is not supported by microlet", name)
		}
		return fmt.Errorf("unknown flag: %s", a)
	}
	return nil
}
