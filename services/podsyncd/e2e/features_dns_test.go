package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The node's cluster DNS for this test; nothing answers there, the pods only
// have to be configured with it.
const (
	e2eClusterDNS    = "10.96.0.10"
	e2eClusterDomain = "cluster.local"
)

// TestPodDNSAndEvents runs issue 11's DNS, /etc/hosts, service-link and
// event scenarios against one node stack configured with a cluster DNS.
func TestPodDNSAndEvents(t *testing.T) {
	s := startStack(t, "--cluster-dns="+e2eClusterDNS, "--cluster-domain="+e2eClusterDomain)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer s.watchNodeReady(ctx)()

	// The Service exists before the pods, so the node's informer has it
	// when their containers are created.
	svc, err := s.admin.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "links-svc"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = s.admin.CoreV1().Services("default").Delete(context.Background(), "links-svc", metav1.DeleteOptions{})
	}()

	// All pods are created at once: a loaded Docker takes minutes per sandbox.
	ndots, no := "2", false
	none := s.Pod("dns-none", corev1.RestartPolicyAlways, "sleep 3600")
	none.Spec.DNSPolicy = corev1.DNSNone
	none.Spec.DNSConfig = &corev1.PodDNSConfig{
		Nameservers: []string{"203.0.113.53"},
		Searches:    []string{"my.search.example"},
		Options:     []corev1.PodDNSConfigOption{{Name: "ndots", Value: &ndots}, {Name: "edns0"}},
	}
	none.Spec.EnableServiceLinks = &no

	cluster := s.Pod("dns-cluster", corev1.RestartPolicyAlways, "sleep 3600")
	cluster.Spec.DNSPolicy = corev1.DNSClusterFirst
	cluster.Spec.Hostname, cluster.Spec.Subdomain = "web", "sub"
	cluster.Spec.HostAliases = []corev1.HostAlias{
		{IP: "203.0.113.7", Hostnames: []string{"foo.example", "bar.example"}},
		{IP: "2001:db8::7", Hostnames: []string{"v6.example"}},
	}
	cluster.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "LINK_URL", Value: "http://$(LINKS_SVC_SERVICE_HOST):$(LINKS_SVC_SERVICE_PORT)"}}

	live := s.Pod("unhealthy", corev1.RestartPolicyAlways, "touch /tmp/healthy; sleep 5; rm /tmp/healthy; sleep 3600")
	live.Spec.Containers[0].LivenessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"test", "-f", "/tmp/healthy"}}},
		PeriodSeconds: 1, FailureThreshold: 2, TimeoutSeconds: 5,
	}
	// spec.setHostnameAsFQDN with a subdomain: the kernel hostname is the
	// FQDN; one whose FQDN is over the kernel's 64 bytes gets no sandbox.
	yes := true
	fqdn := s.Pod("fqdn", corev1.RestartPolicyAlways, "sleep 3600")
	fqdn.Spec.Subdomain, fqdn.Spec.SetHostnameAsFQDN = "sub", &yes
	tooLong := s.Pod("fqdn-veryveryveryverylongforfqdntobemorethan64bytes", corev1.RestartPolicyAlways, "sleep 3600")
	tooLong.Spec.Subdomain, tooLong.Spec.SetHostnameAsFQDN = "sub", &yes
	created := map[string]*corev1.Pod{}
	for _, p := range []*corev1.Pod{none, cluster, live, fqdn, tooLong} {
		created[p.Name] = s.Create(p)
	}
	running := func(p *corev1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	}

	t.Run("dnsPolicy None: /etc/resolv.conf is the pod's dnsConfig alone", func(t *testing.T) {
		s.t = t
		p := s.WaitPod("default", "dns-none", "running", running)
		got := s.execIn(p, "main", "cat", "/etc/resolv.conf")
		for _, want := range []string{"nameserver 203.0.113.53", "search my.search.example"} {
			if !hasLine(got, want) {
				t.Errorf("resolv.conf lacks %q:\n%s", want, got)
			}
		}
		if opts := optionsLine(got); !opts["ndots:2"] || !opts["edns0"] || len(opts) != 2 {
			t.Errorf("resolv.conf options %v, want ndots:2 edns0:\n%s", opts, got)
		}
		if strings.Count(got, "nameserver") != 1 {
			t.Errorf("resolv.conf has other nameservers:\n%s", got)
		}
		// enableServiceLinks false: no link for the namespace's Service.
		if env := s.execIn(p, "main", "env"); strings.Contains(env, "LINKS_SVC_") {
			t.Errorf("service links with enableServiceLinks=false:\n%s", env)
		}
	})

	t.Run("dnsPolicy ClusterFirst: the node's cluster DNS and search path", func(t *testing.T) {
		s.t = t
		p := s.WaitPod("default", "dns-cluster", "running", running)
		got := s.execIn(p, "main", "cat", "/etc/resolv.conf")
		if !hasLine(got, "nameserver "+e2eClusterDNS) || strings.Count(got, "nameserver") != 1 {
			t.Errorf("resolv.conf nameservers, want only %s:\n%s", e2eClusterDNS, got)
		}
		wantSearch := "search default.svc.cluster.local svc.cluster.local cluster.local"
		if line := lineWith(got, "search "); !strings.HasPrefix(line, wantSearch) {
			t.Errorf("search line %q, want it to start with %q", line, wantSearch)
		}
		if opts := optionsLine(got); !opts["ndots:5"] {
			t.Errorf("resolv.conf options %v, want ndots:5", opts)
		}
	})

	t.Run("hostAliases and the pod's FQDN in the managed /etc/hosts", func(t *testing.T) {
		s.t = t
		p := s.WaitPod("default", "dns-cluster", "running with an IP", func(p *corev1.Pod) bool { return running(p) && p.Status.PodIP != "" })
		got := s.execIn(p, "main", "cat", "/etc/hosts")
		for _, want := range []string{
			"# Kubernetes-managed hosts file.",
			"127.0.0.1\tlocalhost",
			p.Status.PodIP + "\tweb.sub.default.svc.cluster.local\tweb",
			"# Entries added by HostAliases.",
			"203.0.113.7\tfoo.example\tbar.example",
			"2001:db8::7\tv6.example",
		} {
			if !hasLine(got, want) {
				t.Errorf("/etc/hosts lacks %q:\n%s", want, got)
			}
		}
		if h := strings.TrimSpace(s.execIn(p, "main", "hostname")); h != "web" {
			t.Errorf("hostname %q, want web", h)
		}
	})

	t.Run("setHostnameAsFQDN: the hostname is the FQDN", func(t *testing.T) {
		s.t = t
		p := s.WaitPod("default", "fqdn", "running", running)
		want := "fqdn.sub.default.svc." + e2eClusterDomain
		if h := strings.TrimSpace(s.execIn(p, "main", "hostname")); h != want {
			t.Errorf("hostname %q, want %q", h, want)
		}
	})

	t.Run("setHostnameAsFQDN over 64 bytes: FailedCreatePodSandBox, the pod stays Pending", func(t *testing.T) {
		s.t = t
		p := created[tooLong.Name]
		fqdnText := tooLong.Name + ".sub.default.svc." + e2eClusterDomain
		want := fmt.Sprintf("Failed to create pod sandbox: failed to construct FQDN from pod hostname and cluster domain, FQDN %s is too long (64 characters is the max, %d characters requested)", fqdnText, len(fqdnText))
		var last string
		s.Eventually("FailedCreatePodSandBox event", 2*time.Minute, func() (bool, string) {
			list, err := s.admin.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
				FieldSelector: "reason=FailedCreatePodSandBox,involvedObject.uid=" + string(p.UID),
			})
			if err != nil {
				return false, err.Error()
			}
			for _, e := range list.Items {
				last = e.Message
				if e.Type == corev1.EventTypeWarning && e.Message == want {
					return true, ""
				}
			}
			return false, fmt.Sprintf("last event %q, want %q", last, want)
		})
		got, err := s.Get("default", tooLong.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase != corev1.PodPending || len(got.Status.ContainerStatuses) > 0 && got.Status.ContainerStatuses[0].State.Running != nil {
			t.Errorf("phase %s, containers %+v; want Pending with nothing running", got.Status.Phase, got.Status.ContainerStatuses)
		}
	})

	t.Run("service links for the namespace's Service", func(t *testing.T) {
		s.t = t
		p := s.WaitPod("default", "dns-cluster", "running", running)
		env := envMap(s.execIn(p, "main", "env"))
		ip := svc.Spec.ClusterIP
		want := map[string]string{
			"LINKS_SVC_SERVICE_HOST":      ip,
			"LINKS_SVC_SERVICE_PORT":      "80",
			"LINKS_SVC_SERVICE_PORT_HTTP": "80",
			"LINKS_SVC_SERVICE_PORT_DNS":  "53",
			"LINKS_SVC_PORT":              "tcp://" + ip + ":80",
			"LINKS_SVC_PORT_80_TCP":       "tcp://" + ip + ":80",
			"LINKS_SVC_PORT_80_TCP_PROTO": "tcp",
			"LINKS_SVC_PORT_80_TCP_PORT":  "80",
			"LINKS_SVC_PORT_80_TCP_ADDR":  ip,
			"LINKS_SVC_PORT_53_UDP":       "udp://" + ip + ":53",
			"LINKS_SVC_PORT_53_UDP_PROTO": "udp",
			"LINK_URL":                    "http://" + ip + ":80",
		}
		for k, v := range want {
			if env[k] != v {
				t.Errorf("%s=%q, want %q", k, env[k], v)
			}
		}
	})

	t.Run("a failing liveness probe gives Unhealthy and Killing events from the kubelet on this node", func(t *testing.T) {
		s.t = t
		s.WaitPod("default", "unhealthy", "restarted", func(p *corev1.Pod) bool {
			return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount >= 1
		})
		uid := created["unhealthy"].UID
		want := map[string]string{
			"Unhealthy": "Liveness probe failed: ",
			"Killing":   "Container main failed liveness probe, will be restarted",
			"Created":   "Container created",
			"Started":   "Container started",
			"Pulled":    fmt.Sprintf("Container image %q already present on machine", s.image),
		}
		var last string
		s.Eventually("pod events", 2*time.Minute, func() (bool, string) {
			list, err := s.admin.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{
				FieldSelector: "involvedObject.name=unhealthy,involvedObject.uid=" + string(uid),
			})
			if err != nil {
				return false, err.Error()
			}
			seen := map[string]bool{}
			var all []string
			for _, e := range list.Items {
				all = append(all, fmt.Sprintf("%s %s %q (%s on %s, %s)", e.Type, e.Reason, e.Message, e.Source.Component, e.Source.Host, e.InvolvedObject.FieldPath))
				if e.Source.Component != "kubelet" || e.Source.Host != s.node || e.InvolvedObject.FieldPath != "spec.containers{main}" {
					continue
				}
				// Exact texts (the probe's command prints nothing, so the
				// kubelet's Unhealthy message ends after the colon), but
				// Pulled, which upstream words two ways depending on
				// whether the pod's access to the image was verified.
				if msg, ok := want[e.Reason]; ok && (e.Message == msg || e.Reason == "Pulled" && strings.HasPrefix(e.Message, msg)) {
					seen[e.Reason] = true
				}
			}
			last = strings.Join(all, "\n")
			for r := range want {
				if !seen[r] {
					return false, "missing " + r + " in:\n" + last
				}
			}
			return true, ""
		})
		if !strings.Contains(last, "Warning Unhealthy") {
			t.Fatalf("Unhealthy is not a Warning:\n%s", last)
		}
	})

	for name := range created {
		s.t = t
		s.deletePod(name)
	}
}

func hasLine(text, want string) bool {
	for _, l := range strings.Split(text, "\n") {
		if strings.TrimSpace(l) == want {
			return true
		}
	}
	return false
}

func lineWith(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func optionsLine(text string) map[string]bool {
	out := map[string]bool{}
	for _, o := range strings.Fields(strings.TrimPrefix(lineWith(text, "options "), "options")) {
		out[o] = true
	}
	return out
}

func envMap(text string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			out[k] = v
		}
	}
	return out
}
