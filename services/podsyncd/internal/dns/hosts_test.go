package dns

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const loopback = "# Kubernetes-managed hosts file.\n" +
	"127.0.0.1\tlocalhost\n" +
	"::1\tlocalhost ip6-localhost ip6-loopback\n" +
	"fe00::0\tip6-localnet\n" +
	"fe00::0\tip6-mcastprefix\n" +
	"fe00::1\tip6-allnodes\n" +
	"fe00::2\tip6-allrouters\n"

// Cases follow upstream's TestManagedHostsFileContent and TestNodeHostsFileContent.
func TestHostsFile(t *testing.T) {
	nodeHosts := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(nodeHosts, []byte("127.0.0.1\tlocalhost\n203.0.113.5\tnode1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	aliases := []corev1.HostAlias{{IP: "123.45.67.89", Hostnames: []string{"foo", "bar", "baz"}}, {IP: "456.78.90.123", Hostnames: []string{"park", "doo", "boo"}}}
	tests := []struct {
		name string
		spec corev1.PodSpec
		ips  []string
		want string
	}{
		{"pod IP and name", corev1.PodSpec{}, []string{"203.0.113.1"}, loopback + "203.0.113.1\tpod1\n"},
		{"hostname and subdomain", corev1.PodSpec{Hostname: "web", Subdomain: "sub"}, []string{"203.0.113.1"},
			loopback + "203.0.113.1\tweb.sub.ns.svc.cluster.local\tweb\n"},
		{"dual stack with aliases", corev1.PodSpec{HostAliases: aliases}, []string{"203.0.113.1", "fd00::6"},
			loopback + "203.0.113.1\tpod1\nfd00::6\tpod1\n\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\tbaz\n456.78.90.123\tpark\tdoo\tboo\n"},
		{"host network: the node's file and aliases", corev1.PodSpec{HostNetwork: true, HostAliases: aliases[:1]}, nil,
			"# Kubernetes-managed hosts file (host network).\n127.0.0.1\tlocalhost\n203.0.113.5\tnode1\n\n# Entries added by HostAliases.\n123.45.67.89\tfoo\tbar\tbaz\n"},
	}
	c, err := New(Config{ClusterDomain: "cluster.local", HostsPath: nodeHosts}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod1", Namespace: "ns"}, Spec: tc.spec}
			dir := t.TempDir()
			path, err := c.WriteHostsFile(dir, pod, tc.ips)
			if err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got\n%s\nwant\n%s", got, tc.want)
			}
			if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
				t.Fatalf("mode %v", st.Mode())
			}
		})
	}
}

func TestPodHostname(t *testing.T) {
	long := strings.Repeat("a", 62) + "-.bcdef"
	tests := []struct {
		name, podName, hostname, subdomain string
		wantHost, wantDomain, wantErr      string
		override                           *string
	}{
		{"pod name", "p", "", "", "p", "", "", nil},
		{"hostnameOverride wins over hostname and subdomain", "p", "h", "s", "override.example.host", "", "", ptr.To("override.example.host")},
		{"hostnameOverride cut to 63", "p", "", "", long[:62], "", "", ptr.To(long[:62] + ".bcdef")},
		{"invalid hostnameOverride", "p", "", "", "", "", `pod HostnameOverride "Bad_Name" is not a valid DNS subdomain`, ptr.To("Bad_Name")},
		{"spec.hostname", "p", "h", "s", "h", "s.ns.svc.cluster.local", "", nil},
		{"cut to 63 without trailing dash", long, "", "", long[:62], "", "", nil},
		{"invalid hostname", "p", "Bad_Name", "", "", "", `pod Hostname "Bad_Name" is not a valid DNS label`, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: tc.podName, Namespace: "ns"}, Spec: corev1.PodSpec{Hostname: tc.hostname, Subdomain: tc.subdomain, HostnameOverride: tc.override}}
			h, d, err := PodHostname(pod, "cluster.local")
			if tc.wantErr != "" {
				if err == nil || len(err.Error()) < len(tc.wantErr) || err.Error()[:len(tc.wantErr)] != tc.wantErr {
					t.Fatalf("err = %v, want %q...", err, tc.wantErr)
				}
				return
			}
			if err != nil || h != tc.wantHost || d != tc.wantDomain {
				t.Fatalf("got %q %q %v, want %q %q", h, d, err, tc.wantHost, tc.wantDomain)
			}
		})
	}
}

func TestKernelHostname(t *testing.T) {
	// "h." plus a domain of 62 characters is exactly the kernel's 64.
	domain62 := "s.ns.svc." + strings.Repeat("d", 53)
	tests := []struct {
		name, hostname, domain string
		asFQDN                 *bool
		want, wantErr          string
	}{
		{"no domain: the hostname, FQDN asked or not", "h", "", ptr.To(true), "h", ""},
		{"domain, setHostnameAsFQDN unset: the hostname", "h", "s.ns.svc.cluster.local", nil, "h", ""},
		{"domain, setHostnameAsFQDN false: the hostname", "h", "s.ns.svc.cluster.local", ptr.To(false), "h", ""},
		{"domain, setHostnameAsFQDN true: the FQDN", "h", "s.ns.svc.cluster.local", ptr.To(true), "h.s.ns.svc.cluster.local", ""},
		{"FQDN of 64 characters fits", "h", domain62, ptr.To(true), "h." + domain62, ""},
		{"FQDN of 65 characters is refused", "hh", domain62, ptr.To(true), "",
			"failed to construct FQDN from pod hostname and cluster domain, FQDN hh." + domain62 + " is too long (64 characters is the max, 65 characters requested)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := KernelHostname(tc.hostname, tc.domain, tc.asFQDN)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestMountsEtcHosts(t *testing.T) {
	pod := &corev1.Pod{}
	c := &corev1.Container{}
	if MountsEtcHosts(pod, c, nil) {
		t.Error("mounted before the pod has an IP")
	}
	if !MountsEtcHosts(pod, c, []string{"10.0.0.1"}) {
		t.Error("not mounted with a pod IP")
	}
	if !MountsEtcHosts(&corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true}}, c, nil) {
		t.Error("not mounted for a host-network pod")
	}
	own := &corev1.Container{VolumeMounts: []corev1.VolumeMount{{Name: "h", MountPath: "/etc/hosts"}}}
	if MountsEtcHosts(pod, own, []string{"10.0.0.1"}) {
		t.Error("mounted over the container's own /etc/hosts")
	}
}
