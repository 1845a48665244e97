package dns

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Cases follow upstream's pkg/kubelet/network/dns/dns_test.go.

func TestParseResolvConf(t *testing.T) {
	tests := []struct {
		data                  string
		servers, search, opts []string
		wantErr               bool
	}{
		{"", nil, nil, nil, false},
		{" ", nil, nil, nil, false},
		{"\t\n\t", nil, nil, nil, false},
		{"#comment\n", nil, nil, nil, false},
		{" #comment\n", nil, nil, nil, false},
		{"#comment\nnameserver", nil, nil, nil, true},
		{"#comment\nnameserver\nsearch", nil, nil, nil, true},
		{"#comment\nnameserver 1.2.3.4\nsearch", []string{"1.2.3.4"}, nil, nil, false},
		{"\tnameserver 1.2.3.4", []string{"1.2.3.4"}, nil, nil, false},
		{"nameserver \t 1.2.3.4", []string{"1.2.3.4"}, nil, nil, false},
		{"nameserver 1.2.3.4\nnameserver 5.6.7.8", []string{"1.2.3.4", "5.6.7.8"}, nil, nil, false},
		{"nameserver 1.2.3.4 #comment", []string{"1.2.3.4"}, nil, nil, false},
		{"search .", nil, nil, nil, false},
		{"search . foo", nil, []string{"foo"}, nil, false},
		{"search foo .  bar", nil, []string{"foo", "bar"}, nil, false},
		{"search foo. bar", nil, []string{"foo", "bar"}, nil, false},
		{"search foo\nsearch bar", nil, []string{"bar"}, nil, false},
		{"nameserver 1.2.3.4\nsearch foo\nnameserver 5.6.7.8\nsearch bar", []string{"1.2.3.4", "5.6.7.8"}, []string{"bar"}, nil, false},
		{"#comment\nnameserver 1.2.3.4\n#comment\nsearch foo\ncomment", []string{"1.2.3.4"}, []string{"foo"}, nil, false},
		{"options ndots:5 attempts:2", nil, nil, []string{"ndots:5", "attempts:2"}, false},
		{"options ndots:1 ndots:5 attempts:2", nil, nil, []string{"ndots:5", "attempts:2"}, false},
		{"options ndots:1 edns0 attempts:2 single-request-reopen", nil, nil, []string{"ndots:1", "edns0", "attempts:2", "single-request-reopen"}, false},
		{"options ndots:1 timeout:3 timeout:1 attempts:3\noptions ndots:5", nil, nil, []string{"ndots:5", "timeout:1", "attempts:3"}, false},
		{"nameserver 1.2.3.4\nsearch foo\nnameserver 5.6.7.8\nsearch bar\noptions ndots:5 attempts:4", []string{"1.2.3.4", "5.6.7.8"}, []string{"bar"}, []string{"ndots:5", "attempts:4"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.data, func(t *testing.T) {
			ns, search, opts, err := ParseResolvConf(strings.NewReader(tc.data))
			if tc.wantErr {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equal(ns, tc.servers) || !equal(search, tc.search) || !equal(opts, tc.opts) {
				t.Fatalf("got %q %q %q, want %q %q %q", ns, search, opts, tc.servers, tc.search, tc.opts)
			}
		})
	}
}

func equal(a, b []string) bool { return len(a) == len(b) && (len(a) == 0 || slices.Equal(a, b)) }

func nextEvent(t *testing.T, rec *record.FakeRecorder) string {
	t.Helper()
	select {
	case e := <-rec.Events:
		return e
	default:
		return ""
	}
}

func TestSearchLimits(t *testing.T) {
	long2048 := []string{strings.Repeat("A", 128)}
	for range 15 {
		long2048 = append(long2048, strings.Repeat("A", 127))
	}
	nums := []string{"testNS.svc.test", "svc.test", "test"}
	for i := 4; i <= 33; i++ {
		nums = append(nums, strings.Repeat("x", i%7+1)+string(rune('a'+i%26)))
	}
	tests := []struct {
		name      string
		in, want  []string
		wantEvent bool
	}{
		{"3 search paths", []string{"testNS.svc.test", "svc.test", "test"}, []string{"testNS.svc.test", "svc.test", "test"}, false},
		{"a path longer than 253 characters is dropped", []string{"a", strings.Repeat("B", 256), "c"}, []string{"a", "c"}, true},
		{"2048 characters fit", long2048, long2048, false},
		{"2050 characters do not", append(slices.Clone(long2048), "B"), long2048, true},
		{"32 paths fit", nums[:32], nums[:32], false},
		{"33 paths do not", nums, nums[:32], true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := record.NewFakeRecorder(10)
			c, err := New(Config{ClusterDomain: "test"}, rec)
			if err != nil {
				t.Fatal(err)
			}
			got := c.fitSearches(slices.Clone(tc.in), &corev1.Pod{})
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %d paths %q, want %d", len(got), got, len(tc.want))
			}
			ev := nextEvent(t, rec)
			want := "Warning DNSConfigForming Search Line limits were exceeded, some search paths have been omitted, the applied search line is: " + strings.Join(tc.want, " ")
			if tc.wantEvent && ev != want {
				t.Fatalf("event %q, want %q", ev, want)
			}
			if !tc.wantEvent && ev != "" {
				t.Fatalf("unexpected event %q", ev)
			}
		})
	}
}

func TestNameserverLimit(t *testing.T) {
	rec := record.NewFakeRecorder(10)
	c, _ := New(Config{}, rec)
	got := c.fitServers([]string{"1.2.3.4", "5.6.7.8", "9.10.11.12", "13.14.15.16"}, &corev1.Pod{})
	if !slices.Equal(got, []string{"1.2.3.4", "5.6.7.8", "9.10.11.12"}) {
		t.Fatalf("got %q", got)
	}
	if ev := nextEvent(t, rec); ev != "Warning DNSConfigForming Nameserver limits were exceeded, some nameservers have been omitted, the applied nameserver line is: 1.2.3.4 5.6.7.8 9.10.11.12" {
		t.Fatalf("event %q", ev)
	}
}

func TestPodDNS(t *testing.T) {
	dir := t.TempDir()
	resolv := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 192.0.2.53\nsearch host.example\noptions timeout:2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	three := "3"
	custom := &corev1.PodDNSConfig{
		Nameservers: []string{"10.0.0.11"}, Searches: []string{"my.domain"},
		Options: []corev1.PodDNSConfigOption{{Name: "ndots", Value: &three}, {Name: "debug"}},
	}
	cluster := Config{ClusterDNS: []string{"10.0.0.10"}, ClusterDomain: "kubernetes.io", ResolvConf: resolv}
	clusterSearch := []string{"testNS.svc.kubernetes.io", "svc.kubernetes.io", "kubernetes.io", "host.example"}
	tests := []struct {
		name       string
		cfg        Config
		policy     corev1.DNSPolicy
		hostNet    bool
		dnsConfig  *corev1.PodDNSConfig
		want       *runtimeapi.DNSConfig
		wantEvents []string
	}{
		{"None without dnsConfig is empty", cluster, corev1.DNSNone, false, nil, &runtimeapi.DNSConfig{}, nil},
		{"None with dnsConfig is the dnsConfig", cluster, corev1.DNSNone, false, &corev1.PodDNSConfig{
			Nameservers: []string{"203.0.113.1"}, Searches: []string{"my.domain", "second.domain"}, Options: custom.Options,
		}, &runtimeapi.DNSConfig{Servers: []string{"203.0.113.1"}, Searches: []string{"my.domain", "second.domain"}, Options: []string{"ndots:3", "debug"}}, nil},
		{"ClusterFirst", cluster, corev1.DNSClusterFirst, false, nil,
			&runtimeapi.DNSConfig{Servers: []string{"10.0.0.10"}, Searches: clusterSearch, Options: []string{"ndots:5"}}, nil},
		{"ClusterFirst merges dnsConfig", cluster, corev1.DNSClusterFirst, false, custom,
			&runtimeapi.DNSConfig{Servers: []string{"10.0.0.10", "10.0.0.11"}, Searches: append(slices.Clone(clusterSearch), "my.domain"), Options: []string{"ndots:3", "debug"}}, nil},
		{"ClusterFirstWithHostNet on the host network", cluster, corev1.DNSClusterFirstWithHostNet, true, custom,
			&runtimeapi.DNSConfig{Servers: []string{"10.0.0.10", "10.0.0.11"}, Searches: append(slices.Clone(clusterSearch), "my.domain"), Options: []string{"ndots:3", "debug"}}, nil},
		{"ClusterFirst on the host network is Default", cluster, corev1.DNSClusterFirst, true, nil,
			&runtimeapi.DNSConfig{Servers: []string{"192.0.2.53"}, Searches: []string{"host.example"}, Options: []string{"timeout:2"}}, nil},
		{"Default merges dnsConfig", cluster, corev1.DNSDefault, false, custom,
			&runtimeapi.DNSConfig{Servers: []string{"192.0.2.53", "10.0.0.11"}, Searches: []string{"host.example", "my.domain"}, Options: []string{"timeout:2", "ndots:3", "debug"}}, nil},
		{"ClusterFirst without cluster DNS falls back to Default", Config{ClusterDomain: "kubernetes.io", ResolvConf: resolv}, corev1.DNSClusterFirst, false, nil,
			&runtimeapi.DNSConfig{Servers: []string{"192.0.2.53"}, Searches: []string{"host.example"}, Options: []string{"timeout:2"}},
			[]string{
				`Warning MissingClusterDNS kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.`,
				`Warning MissingClusterDNS pod: "test_pod_testNS(u1)". kubelet does not have ClusterDNS IP configured and cannot create Pod using "ClusterFirst" policy. Falling back to "Default" policy.`,
			}},
		{"Default without a resolv.conf is a local resolver", Config{ClusterDNS: []string{"10.0.0.10"}}, corev1.DNSDefault, false, nil,
			&runtimeapi.DNSConfig{Servers: []string{"127.0.0.1"}, Searches: []string{"."}}, nil},
		{"Default without a resolv.conf on an IPv6 node", Config{NodeIPs: []string{"fd00::1"}}, corev1.DNSDefault, false, nil,
			&runtimeapi.DNSConfig{Servers: []string{"::1"}, Searches: []string{"."}}, nil},
		{"ClusterFirst without a cluster domain keeps the host's search", Config{ClusterDNS: []string{"10.0.0.10"}, ResolvConf: resolv}, corev1.DNSClusterFirst, false, nil,
			&runtimeapi.DNSConfig{Servers: []string{"10.0.0.10"}, Searches: []string{"host.example"}, Options: []string{"ndots:5"}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := record.NewFakeRecorder(10)
			c, err := New(tc.cfg, rec)
			if err != nil {
				t.Fatal(err)
			}
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "test_pod", Namespace: "testNS", UID: "u1"},
				Spec: corev1.PodSpec{DNSPolicy: tc.policy, HostNetwork: tc.hostNet, DNSConfig: tc.dnsConfig}}
			got, err := c.PodDNS(pod)
			if err != nil {
				t.Fatal(err)
			}
			if !equal(got.Servers, tc.want.Servers) || !equal(got.Searches, tc.want.Searches) || !equal(got.Options, tc.want.Options) {
				t.Fatalf("got  %v\nwant %v", got, tc.want)
			}
			for _, want := range tc.wantEvents {
				if ev := nextEvent(t, rec); ev != want {
					t.Fatalf("event %q\nwant  %q", ev, want)
				}
			}
			if ev := nextEvent(t, rec); ev != "" {
				t.Fatalf("unexpected event %q", ev)
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{{ClusterDNS: []string{"not-an-ip"}}, {ClusterDomain: "Bad_Domain"}} {
		if _, err := New(cfg, nil); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	c, _ := New(Config{ResolvConf: "/nonexistent/resolv.conf"}, nil)
	if _, err := c.PodDNS(&corev1.Pod{}); err == nil || !strings.Contains(err.Error(), "/nonexistent/resolv.conf") {
		t.Errorf("missing resolv.conf: err = %v", err)
	}
}

func TestCheckResolvConf(t *testing.T) {
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	paths := make([]string, 30)
	for i := range paths {
		paths[i] = strings.Repeat("d", i+1)
	}
	if err := os.WriteFile(resolv, []byte("search "+strings.Join(paths, " ")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rec := record.NewFakeRecorder(10)
	c, _ := New(Config{ClusterDomain: "cluster.local", ResolvConf: resolv}, rec)
	c.CheckResolvConf()
	want := "Warning CheckLimitsForResolvConf Resolv.conf file '" + resolv + "' contains search line consisting of more than 29 domains!"
	if ev := nextEvent(t, rec); ev != want {
		t.Fatalf("event %q, want %q", ev, want)
	}
}

func FuzzParseResolvConf(f *testing.F) {
	for _, s := range []string{"nameserver 1.2.3.4\nsearch a b.\noptions ndots:2 x", "search .", "nameserver"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ns, search, _, _ := ParseResolvConf(strings.NewReader(s))
		for _, x := range append(ns, search...) {
			if strings.ContainsAny(x, " \t\n") {
				t.Fatalf("field %q has whitespace", x)
			}
		}
	})
}
