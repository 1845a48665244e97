package nodeshutdown

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/microlet/microlet/internal/config"
	"github.com/microlet/microlet/internal/podutil"
)

// TestPeriods holds the short form's conversion to the kubelet's vectors
// (Test_migrateConfig in pkg/kubelet/nodeshutdown).
func TestPeriods(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  Config
		want []GracePeriodByPriority
	}{
		"both periods": {Config{GracePeriod: 300 * time.Second, GracePeriodCriticalPods: 120 * time.Second},
			[]GracePeriodByPriority{{0, 180}, {podutil.SystemCriticalPriority, 120}}},
		"only shutdownGracePeriod": {Config{GracePeriod: 100 * time.Second},
			[]GracePeriodByPriority{{0, 100}, {podutil.SystemCriticalPriority, 0}}},
		"empty":                {Config{}, nil},
		"critical above total": {Config{GracePeriod: time.Second, GracePeriodCriticalPods: 100 * time.Second}, nil},
		"by priority, sorted low to high": {Config{ByPodPriority: []GracePeriodByPriority{{100000, 10}, {0, 30}, {10000, 20}}},
			[]GracePeriodByPriority{{0, 30}, {10000, 20}, {100000, 10}}},
	} {
		t.Run(name, func(t *testing.T) {
			if got := tc.cfg.Periods(); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Periods() = %v, want %v", got, tc.want)
			}
		})
	}
	if got := Requested([]GracePeriodByPriority{{0, 30}, {10000, 20}, {100000, 10}}); got != time.Minute {
		t.Fatalf("Requested = %s, want 1m", got)
	}
}

// TestValidate holds the kubelet's checks, each error naming the key.
func TestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  Config
		want []string // substrings; none means valid
	}{
		"off": {Config{}, nil},
		"no drop-in": {Config{GracePeriod: 30 * time.Second},
			[]string{"logind_drop_in: Required value: graceful shutdown may need to raise logind's delay"}},
		"short form":  {Config{GracePeriod: 30 * time.Second, GracePeriodCriticalPods: 10 * time.Second, LogindDropIn: DefaultDropIn}, nil},
		"by priority": {Config{ByPodPriority: []GracePeriodByPriority{{0, 10}, {podutil.SystemCriticalPriority, 5}}, LogindDropIn: DefaultDropIn}, nil},
		"critical above total": {Config{GracePeriod: 10 * time.Second, GracePeriodCriticalPods: 20 * time.Second},
			[]string{`shutdown_grace_period_critical_pods: Invalid value: "20s": must be <= shutdown_grace_period (10s)`}},
		"sub-second": {Config{GracePeriod: 500 * time.Millisecond},
			[]string{`shutdown_grace_period: Invalid value: "500ms": must be either zero or otherwise >= 1s`}},
		"negative critical": {Config{GracePeriod: 10 * time.Second, GracePeriodCriticalPods: -time.Second},
			[]string{`shutdown_grace_period_critical_pods: Invalid value: "-1s": must be either zero`}},
		"both forms": {Config{GracePeriod: 10 * time.Second, ByPodPriority: []GracePeriodByPriority{{0, 10}}},
			[]string{"shutdown_grace_period_by_pod_priority: Forbidden: cannot be given together with shutdown_grace_period or shutdown_grace_period_critical_pods"}},
		"both forms (critical only)": {Config{GracePeriodCriticalPods: 10 * time.Second, ByPodPriority: []GracePeriodByPriority{{0, 10}}},
			[]string{"cannot be given together", `shutdown_grace_period_critical_pods: Invalid value: "10s": must be <= shutdown_grace_period (0s)`}},
		"negative seconds": {Config{ByPodPriority: []GracePeriodByPriority{{0, 10}, {5, -1}}},
			[]string{"shutdown_grace_period_by_pod_priority[1].shutdown_grace_period_seconds: Invalid value: -1: must not be negative"}},
	} {
		t.Run(name, func(t *testing.T) {
			err := config.Join(tc.cfg.Validate())
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func pod(name string, prio int32, grace *int64) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{Priority: ptr.To(prio), TerminationGracePeriodSeconds: grace}}
}

func names(ps []*corev1.Pod) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

// TestGroupByPriority holds upstream's vectors (Test_groupByPriority):
// boundaries go to the lower entry, pods below the lowest entry to the
// lowest, above the highest to the highest.
func TestGroupByPriority(t *testing.T) {
	four := []GracePeriodByPriority{{1, 10}, {2, 20}, {3, 30}, {4, 40}}
	six := []*corev1.Pod{pod("pod-0", 0, nil), pod("pod-1", 1, nil), pod("pod-2", 2, nil), pod("pod-3", 3, nil), pod("pod-4", 4, nil), pod("pod-5", 5, nil)}
	for name, tc := range map[string]struct {
		periods []GracePeriodByPriority
		pods    []*corev1.Pod
		want    [][]string
	}{
		"migrated config": {
			Config{GracePeriod: 300 * time.Second, GracePeriodCriticalPods: 120 * time.Second}.Periods(),
			[]*corev1.Pod{pod("normal-pod", 0, nil), pod("highest-user-definable-pod", podutil.HighestUserDefinablePriority, nil), pod("critical-pod", podutil.SystemCriticalPriority, nil)},
			[][]string{{"normal-pod", "highest-user-definable-pod"}, {"critical-pod"}},
		},
		"pod priority":           {four, six, [][]string{{"pod-0", "pod-1"}, {"pod-2"}, {"pod-3"}, {"pod-4", "pod-5"}}},
		"no pods":                {four, nil, [][]string{{}, {}, {}, {}}},
		"between entries go low": {[]GracePeriodByPriority{{0, 5}, {100, 5}}, []*corev1.Pod{pod("p50", 50, nil), pod("p100", 100, nil), pod("p99", 99, nil)}, [][]string{{"p50", "p99"}, {"p100"}}},
		"no priority is 0":       {[]GracePeriodByPriority{{-10, 1}, {0, 2}, {10, 3}}, []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "none"}}, pod("neg", -20, nil)}, [][]string{{"neg"}, {"none"}, {}}},
	} {
		t.Run(name, func(t *testing.T) {
			got := GroupByPriority(tc.periods, tc.pods)
			if len(got) != len(tc.periods) {
				t.Fatalf("%d groups, want %d", len(got), len(tc.periods))
			}
			for i, g := range got {
				if g.GracePeriodByPriority != tc.periods[i] {
					t.Errorf("group %d period %v, want %v", i, g.GracePeriodByPriority, tc.periods[i])
				}
				if n := names(g.Pods); !reflect.DeepEqual(n, tc.want[i]) {
					t.Errorf("group %d (priority %d) pods %v, want %v", i, g.Priority, n, tc.want[i])
				}
			}
		})
	}
}

// TestGraceFor: the group's period, or the pod's own when shorter.
func TestGraceFor(t *testing.T) {
	g := Group{GracePeriodByPriority: GracePeriodByPriority{Priority: 0, ShutdownGracePeriodSeconds: 20}}
	for _, tc := range []struct {
		own  *int64
		want int64
	}{{nil, 20}, {ptr.To[int64](30), 20}, {ptr.To[int64](20), 20}, {ptr.To[int64](5), 5}, {ptr.To[int64](0), 0}} {
		if got := graceFor(g, pod("p", 0, tc.own)); got != tc.want {
			t.Errorf("own %v: grace %d, want %d", tc.own, got, tc.want)
		}
	}
}
