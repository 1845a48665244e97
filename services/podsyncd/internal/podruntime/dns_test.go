package podruntime

import (
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/microlet/microlet/services/podsyncd/internal/dns"
	"github.com/microlet/microlet/services/podsyncd/internal/volumes"
)

// The sandbox config carries the pod's DNS and each container gets the
// managed /etc/hosts unless it mounts its own.
func TestSandboxDNSAndHostsMount(t *testing.T) {
	conf, err := dns.New(dns.Config{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	m := NewManager(nil, nil, Options{DNS: conf, Volumes: volumes.New(dir, nil, nil)})
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}, Spec: corev1.PodSpec{
		DNSPolicy: corev1.DNSClusterFirst, Hostname: "h",
		HostAliases: []corev1.HostAlias{{IP: "192.0.2.9", Hostnames: []string{"alias"}}},
	}}
	cfg, err := m.sandboxConfig(pod, 0)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Hostname != "h" || !slices.Equal(cfg.DnsConfig.Servers, []string{"10.96.0.10"}) ||
		!slices.Equal(cfg.DnsConfig.Searches, []string{"ns.svc.cluster.local", "svc.cluster.local", "cluster.local"}) {
		t.Fatalf("sandbox hostname %q dns %v", cfg.Hostname, cfg.DnsConfig)
	}

	c := &corev1.Container{Name: "c"}
	if mnt, err := m.hostsMount(pod, c, nil); err != nil || mnt != nil {
		t.Fatalf("before the sandbox has an IP: %v, %v", mnt, err)
	}
	mnt, err := m.hostsMount(pod, c, []string{"10.1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	if mnt.ContainerPath != "/etc/hosts" || !strings.HasPrefix(mnt.HostPath, dir) || mnt.Readonly {
		t.Fatalf("mount %+v", mnt)
	}
	data, err := os.ReadFile(mnt.HostPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"10.1.2.3\th\n", "192.0.2.9\talias\n"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("hosts file lacks %q:\n%s", want, data)
		}
	}
	own := &corev1.Container{Name: "own", VolumeMounts: []corev1.VolumeMount{{Name: "v", MountPath: "/etc/hosts"}}}
	if mnt, _ := m.hostsMount(pod, own, []string{"10.1.2.3"}); mnt != nil {
		t.Fatalf("container with its own /etc/hosts got %+v", mnt)
	}
}

// A hostNetwork pod's sandbox asks for no hostname, as the kubelet's does:
// it shares the node's UTS namespace, and runc (so containerd) refuses to
// set a hostname without a private one.
func TestSandboxHostnameHostNetwork(t *testing.T) {
	m := NewManager(nil, nil, Options{Volumes: volumes.New(t.TempDir(), nil, nil)})
	for _, tc := range []struct {
		name string
		host bool
		want string
	}{
		{"pod network: the pod's hostname", false, "h"},
		{"host network: none", true, ""},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"}, Spec: corev1.PodSpec{Hostname: "h", HostNetwork: tc.host}}
		cfg, err := m.sandboxConfig(pod, 0)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Hostname != tc.want {
			t.Errorf("%s: sandbox hostname %q, want %q", tc.name, cfg.Hostname, tc.want)
		}
	}
}

// spec.setHostnameAsFQDN makes the sandbox's hostname the pod's FQDN under
// the node's cluster domain when the pod has a subdomain, as the kubelet's
// generatePodSandboxConfig; a FQDN over the kernel's 64 bytes fails the
// sandbox config.
func TestSandboxHostnameFQDN(t *testing.T) {
	conf, err := dns.New(dns.Config{ClusterDNS: []string{"10.96.0.10"}, ClusterDomain: "cluster.local"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(nil, nil, Options{DNS: conf, Volumes: volumes.New(t.TempDir(), nil, nil)})
	yes := true
	for _, tc := range []struct {
		name, podName, subdomain string
		asFQDN                   *bool
		want, wantErr            string
	}{
		{"subdomain, setHostnameAsFQDN: the FQDN", "p", "t", &yes, "p.t.ns.svc.cluster.local", ""},
		{"subdomain only: the short name", "p", "t", nil, "p", ""},
		{"setHostnameAsFQDN without subdomain: the short name", "p", "", &yes, "p", ""},
		{"FQDN over 64 bytes: no sandbox config", strings.Repeat("p", 42), "t", &yes, "", "failed to construct FQDN from pod hostname and cluster domain, FQDN "},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.podName, Namespace: "ns", UID: "u1"},
			Spec: corev1.PodSpec{Subdomain: tc.subdomain, SetHostnameAsFQDN: tc.asFQDN}}
		cfg, err := m.sandboxConfig(pod, 0)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("%s: err %v, want %q...", tc.name, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case cfg.Hostname != tc.want:
			t.Errorf("%s: sandbox hostname %q, want %q", tc.name, cfg.Hostname, tc.want)
		}
	}
}
