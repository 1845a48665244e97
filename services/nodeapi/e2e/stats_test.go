package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	statsv1alpha1 "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/microlet/microlet/internal/testenv/node"
)

// TestResourceMetrics scrapes nodeapi the way metrics-server does: directly,
// with its own identity allowed only nodes/metrics and nodes/stats by RBAC
// (so the SubjectAccessReview path is proven, not the system:masters
// shortcut), two scrapes, rates from the counters' timestamps. The summary
// API is checked field by field for what `kubectl top` shows.
func TestResourceMetrics(t *testing.T) {
	n := node.Start(t, node.Options{})
	port := servingPort(t, n)
	ctx := context.Background()

	// metrics-server's ClusterRole, bound to a certificate identity.
	const user = "e2e-metrics-scraper"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/metrics", "nodes/stats"}, Verbs: []string{"get"}}},
	}
	if _, err := n.Admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if _, err := n.Admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	certPEM, keyPEM, err := n.CP.PKI().ClientCert(user)
	if err != nil {
		t.Fatal(err)
	}
	scraper := newClient(t, port, &rest.Config{TLSClientConfig: rest.TLSClientConfig{CertData: certPEM, KeyData: keyPEM}})

	// A pod that burns a fifth of a core and holds 32 MiB.
	p := n.Pod("burner", corev1.RestartPolicyAlways, `head -c 33554432 /dev/zero > /dev/shm/hold; while :; do :; done`)
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("200m"), corev1.ResourceMemory: resource.MustParse("128Mi")}
	p = n.Create(p)
	n.WaitPod(p.Namespace, p.Name, "running", running)

	if code, body := scraper.do(http.MethodGet, "/pods"); code != http.StatusForbidden {
		t.Errorf("the scraper may read /pods: %d %s", code, body)
	}

	t.Run("metrics/resource", func(t *testing.T) {
		type sample struct {
			v  float64
			ts int64
		}
		scrape := func() map[string]sample {
			code, body := scraper.do(http.MethodGet, "/metrics/resource")
			if code != http.StatusOK {
				t.Fatalf("/metrics/resource: %d %s", code, body)
			}
			parser := expfmt.NewTextParser(model.UTF8Validation)
			families, err := parser.TextToMetricFamilies(strings.NewReader(body))
			if err != nil {
				t.Fatalf("parse: %v\n%s", err, body)
			}
			out := map[string]sample{}
			for name, f := range families {
				for _, m := range f.GetMetric() {
					out[name+labelKey(m)] = sample{v: value(m), ts: m.GetTimestampMs()}
				}
			}
			return out
		}
		podKey := `{namespace="default",pod="burner"}`
		ctrKey := `{container="main",namespace="default",pod="burner"}`
		want := []string{"node_cpu_usage_seconds_total{}", "node_memory_working_set_bytes{}",
			"pod_cpu_usage_seconds_total" + podKey, "pod_memory_working_set_bytes" + podKey,
			"container_cpu_usage_seconds_total" + ctrKey, "container_memory_working_set_bytes" + ctrKey,
			"container_start_time_seconds" + ctrKey, "resource_scrape_error{}"}
		var first map[string]sample
		n.Eventually("every resource metric of the node, pod and container", 2*time.Minute, func() (bool, string) {
			first = scrape()
			for _, k := range want {
				if _, ok := first[k]; !ok {
					return false, "missing " + k
				}
			}
			// The 32 MiB it holds, once written.
			ws := first["container_memory_working_set_bytes"+ctrKey].v
			return ws >= 32<<20, fmt.Sprintf("container working set %v bytes", ws)
		})
		if first["resource_scrape_error{}"].v != 0 {
			t.Errorf("resource_scrape_error = %v", first["resource_scrape_error{}"].v)
		}
		// metrics-server's rate: the counter's increase over its timestamps.
		n.Eventually("CPU rates from two scrapes", 2*time.Minute, func() (bool, string) {
			second := scrape()
			for _, k := range []string{"node_cpu_usage_seconds_total{}", "pod_cpu_usage_seconds_total" + podKey, "container_cpu_usage_seconds_total" + ctrKey} {
				a, b := first[k], second[k]
				if b.ts <= a.ts || b.v <= a.v {
					return false, k + " did not advance"
				}
			}
			return true, ""
		})
	})

	t.Run("stats/summary", func(t *testing.T) {
		var s statsv1alpha1.Summary
		n.Eventually("CPU rates in the summary", 2*time.Minute, func() (bool, string) {
			code, body := scraper.do(http.MethodGet, "/stats/summary")
			if code != http.StatusOK {
				return false, body
			}
			s = statsv1alpha1.Summary{}
			if err := json.Unmarshal([]byte(body), &s); err != nil {
				t.Fatal(err)
			}
			ps := findPod(&s, p)
			return s.Node.CPU != nil && s.Node.CPU.UsageNanoCores != nil && *s.Node.CPU.UsageNanoCores > 0 &&
				ps != nil && ps.CPU != nil && ps.CPU.UsageNanoCores != nil && *ps.CPU.UsageNanoCores > 0, "no rates yet"
		})
		if s.Node.NodeName != n.Name {
			t.Errorf("node name %q", s.Node.NodeName)
		}
		if s.Node.Memory == nil || s.Node.Memory.WorkingSetBytes == nil || *s.Node.Memory.WorkingSetBytes == 0 ||
			s.Node.Memory.AvailableBytes == nil {
			t.Errorf("node memory %+v", s.Node.Memory)
		}
		if s.Node.Fs == nil || s.Node.Fs.CapacityBytes == nil || *s.Node.Fs.CapacityBytes == 0 {
			t.Errorf("node fs %+v", s.Node.Fs)
		}
		ps := findPod(&s, p)
		if len(ps.Containers) != 1 || ps.Containers[0].Name != "main" {
			t.Fatalf("containers %+v", ps.Containers)
		}
		c := ps.Containers[0]
		if c.Memory == nil || c.Memory.WorkingSetBytes == nil || *c.Memory.WorkingSetBytes < 32<<20 {
			t.Errorf("container memory %+v", c.Memory)
		}
		// A fifth of a core, give or take what a busy two-core machine
		// grants: never more than the quota allows by much.
		if nc := *ps.CPU.UsageNanoCores; nc > 400_000_000 {
			t.Errorf("pod CPU %d nanocores over a 200m limit", nc)
		}
		code, body := scraper.do(http.MethodGet, "/stats/summary?only_cpu_and_memory=true")
		var small statsv1alpha1.Summary
		if code != http.StatusOK || json.Unmarshal([]byte(body), &small) != nil || small.Node.Fs != nil || findPod(&small, p) == nil {
			t.Errorf("only_cpu_and_memory: %d %s", code, body)
		}
	})
}

func findPod(s *statsv1alpha1.Summary, p *corev1.Pod) *statsv1alpha1.PodStats {
	for i := range s.Pods {
		r := s.Pods[i].PodRef
		if r.Name == p.Name && r.Namespace == p.Namespace && r.UID == string(p.UID) {
			return &s.Pods[i]
		}
	}
	return nil
}

func labelKey(m *dto.Metric) string {
	var parts []string
	for _, l := range m.GetLabel() {
		parts = append(parts, l.GetName()+`="`+l.GetValue()+`"`)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Untyped != nil:
		return m.GetUntyped().GetValue()
	}
	return 0
}
