package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/node"
)

// metrics GETs path from nodeapi and parses it; a status other than 200
// fails the test.
func (c client) metrics(path string) testenv.Metrics {
	c.t.Helper()
	code, body := c.do(http.MethodGet, path)
	if code != http.StatusOK {
		c.t.Fatalf("GET %s: %d %s", path, code, body)
	}
	m, err := testenv.ParseMetrics([]byte(body))
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	return m
}

// TestKubeletMetrics scrapes the kubelet API as a monitoring stack does:
// /metrics has the kubelet_* series podsyncd keeps beside nodeapi's own,
// with values that match what runs (three pods started, three running),
// /metrics/probes counts the readiness probes of a probed pod, and a
// client without the nodes/metrics permission is refused both.
func TestKubeletMetrics(t *testing.T) {
	n := node.Start(t, node.Options{})
	port := servingPort(t, n)
	admin := newClient(t, port, n.CP.AdminConfig())

	before := admin.metrics("/metrics")
	started0 := before.Count("kubelet_pod_start_duration_seconds", nil)
	sli0 := before.Count("kubelet_pod_start_sli_duration_seconds", nil)
	if got := before.Sum("kubelet_node_name", map[string]string{"node": n.Name}); got != 1 {
		t.Errorf("kubelet_node_name{node=%q} = %v, want 1", n.Name, got)
	}

	probed := n.Pod("km-probed", corev1.RestartPolicyAlways, `exec sleep 3600`)
	probed.Spec.Containers[0].ReadinessProbe = &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}},
		PeriodSeconds: 1,
	}
	probed = n.Create(probed)
	for _, name := range []string{"km-plain-a", "km-plain-b"} {
		n.Create(n.Pod(name, corev1.RestartPolicyAlways, `exec sleep 3600`))
	}
	for _, name := range []string{"km-plain-a", "km-plain-b"} {
		n.WaitPod(corev1.NamespaceDefault, name, "running", running)
	}
	n.WaitPod(corev1.NamespaceDefault, "km-probed", "ready", node.Ready)

	var after testenv.Metrics
	n.Eventually("kubelet metrics show the three pods", 2*time.Minute, func() (bool, string) {
		after = admin.metrics("/metrics")
		pods := after.Sum("kubelet_running_pods", nil)
		containers := after.Sum("kubelet_running_containers", map[string]string{"container_state": "running"})
		startedDelta := after.Count("kubelet_pod_start_duration_seconds", nil) - started0
		active := after.Sum("kubelet_active_pods", map[string]string{"static": ""})
		// The SLI ends when the watch shows the status podsyncd reported.
		sliDelta := after.Count("kubelet_pod_start_sli_duration_seconds", nil) - sli0
		return pods == 3 && containers == 3 && startedDelta == 3 && active == 3 && sliDelta == 3,
			fmt.Sprintf("running_pods=%v running_containers{running}=%v pod_start_duration count grew by %d active_pods=%v pod_start_sli count grew by %d",
				pods, containers, startedDelta, active, sliDelta)
	})
	for _, tc := range []struct {
		name  string
		match map[string]string
		want  float64
	}{
		{"kubelet_started_pods_total", nil, 3},
		{"kubelet_started_pods_errors_total", nil, 0},
		{"kubelet_started_containers_total", map[string]string{"container_type": "container"}, 3},
		{"kubelet_runtime_operations_total", map[string]string{"operation_type": "run_podsandbox"}, 3},
		{"kubelet_runtime_operations_errors_total", map[string]string{"operation_type": "run_podsandbox"}, 0},
		{"kubelet_desired_pods", map[string]string{"static": ""}, 3},
		{"kubelet_desired_pods", map[string]string{"static": "true"}, 0},
		{"kubelet_node_name", map[string]string{"node": n.Name}, 1},
	} {
		if got := after.Sum(tc.name, tc.match); got != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.match, got, tc.want)
		}
	}
	if after.Count("kubelet_pleg_relist_duration_seconds", nil) == 0 || after.Sum("kubelet_pleg_last_seen_seconds", nil) == 0 {
		t.Error("no PLEG relist recorded")
	}
	if after.Count("kubelet_pod_worker_duration_seconds", map[string]string{"operation_type": "create"}) < 3 {
		t.Error("kubelet_pod_worker_duration_seconds{operation_type=create} has fewer than the three pods' first syncs")
	}
	if v := after.Sum("kubelet_cgroup_version", nil); v != 1 && v != 2 {
		t.Errorf("kubelet_cgroup_version = %v", v)
	}
	if after["microlet_nodeapi_http_requests_total"] == nil || after["go_goroutines"] == nil {
		t.Error("/metrics lost nodeapi's own metrics")
	}
	if mf := after["kubelet_running_pods"]; !strings.HasPrefix(mf.GetHelp(), "[ALPHA] ") {
		t.Errorf("kubelet_running_pods help %q: want upstream's, with its stability level", mf.GetHelp())
	}

	// The readiness probe runs every second: its successes keep growing.
	readiness := map[string]string{"probe_type": "Readiness", "result": "successful", "namespace": corev1.NamespaceDefault,
		"pod": "km-probed", "pod_uid": string(probed.UID), "container": "main"}
	first := admin.metrics("/metrics/probes").Sum("prober_probe_total", readiness)
	if first < 1 {
		t.Fatalf("prober_probe_total%v = %v for a Ready pod", readiness, first)
	}
	n.Eventually("readiness probe successes grow", time.Minute, func() (bool, string) {
		m := admin.metrics("/metrics/probes")
		got := m.Sum("prober_probe_total", readiness)
		failed := m.Sum("prober_probe_total", map[string]string{"pod": "km-probed", "result": "failed"})
		return got >= first+2 && failed == 0 && m["process_start_time_seconds"] != nil,
			fmt.Sprintf("successful=%v (first %v) failed=%v", got, first, failed)
	})

	// Authentication and authorization are the kubelet's: subresource metrics.
	anonymous := newClient(t, port, nil)
	other := newClient(t, port, n.CP.NodeConfig("some-other-node"))
	for _, path := range []string{"/metrics", "/metrics/probes"} {
		if code, body := anonymous.do(http.MethodGet, path); code != http.StatusUnauthorized {
			t.Errorf("anonymous GET %s: %d %q, want 401", path, code, body)
		}
		code, body := other.do(http.MethodGet, path)
		if code != http.StatusForbidden || !strings.Contains(body, "subresource(s)=[metrics]") || strings.Contains(body, "kubelet_") {
			t.Errorf("another node's GET %s: %d %q, want 403 naming subresource metrics", path, code, body)
		}
	}
}
