package merge

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/podsource"
)

func pod(name string, mods ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name),
			Labels: map[string]string{"app": name}, Annotations: map[string]string{"a": "1"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	for _, m := range mods {
		m(p)
	}
	return p
}

func withImage(img string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Containers[0].Image = img }
}

func withLabel(v string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Labels["app"] = v } }

func withAnnotation(k, v string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Annotations[k] = v }
}

func withStatus(msg string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Status.Message = msg }
}

func withDeletion(p *corev1.Pod) {
	t := metav1.NewTime(time.Unix(1000, 0))
	g := int64(30)
	p.DeletionTimestamp = &t
	p.DeletionGracePeriodSeconds = &g
}

func withGrace(g int64) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.DeletionGracePeriodSeconds = &g }
}

func withUID(uid string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.UID = types.UID(uid) } }

type want struct {
	op    Op
	names []string
}

func summarize(ups []Update) []want {
	var out []want
	for _, u := range ups {
		w := want{op: u.Op, names: []string{}}
		for _, p := range u.Pods {
			w.names = append(w.names, p.Name)
		}
		out = append(out, w)
	}
	return out
}

func TestMerge(t *testing.T) {
	base := []*corev1.Pod{pod("a"), pod("b"), pod("c"), pod("d"), pod("e")}
	tests := []struct {
		name    string
		first   []*corev1.Pod
		second  []*corev1.Pod
		want    []want
		refused int
	}{
		{name: "unchanged set is silent", first: base, second: []*corev1.Pod{pod("a"), pod("b"), pod("c"), pod("d"), pod("e")}},
		{name: "new pod is ADD", first: base[:1], second: []*corev1.Pod{pod("a"), pod("b")},
			want: []want{{OpAdd, []string{"b"}}}},
		{name: "spec change is UPDATE", first: base[:1], second: []*corev1.Pod{pod("a", withImage("nginx"))},
			want: []want{{OpUpdate, []string{"a"}}}},
		{name: "label change is UPDATE", first: base[:1], second: []*corev1.Pod{pod("a", withLabel("x"))},
			want: []want{{OpUpdate, []string{"a"}}}},
		{name: "annotation change is UPDATE", first: base[:1], second: []*corev1.Pod{pod("a", withAnnotation("a", "2"))},
			want: []want{{OpUpdate, []string{"a"}}}},
		{name: "grace period change is UPDATE", first: base[:1], second: []*corev1.Pod{pod("a", withGrace(5))},
			want: []want{{OpUpdate, []string{"a"}}}},
		{name: "local annotations are ignored", first: base[:1],
			second: []*corev1.Pod{pod("a", withAnnotation(podsource.FirstSeenAnnotation, "x"), withAnnotation(podsource.MirrorAnnotation, "y"), withAnnotation(podsource.SourceAnnotation, "z"))}},
		{name: "deletion timestamp is DELETE", first: base[:1], second: []*corev1.Pod{pod("a", withDeletion)},
			want: []want{{OpDelete, []string{"a"}}}},
		{name: "leaving the source is REMOVE", first: base[:2], second: []*corev1.Pod{pod("a")},
			want: []want{{OpRemove, []string{"b"}}}},
		{name: "status-only change is RECONCILE", first: base[:1], second: []*corev1.Pod{pod("a", withStatus("hi"))},
			want: []want{{OpReconcile, []string{"a"}}}},
		{name: "spec and status change is UPDATE only", first: base[:1], second: []*corev1.Pod{pod("a", withImage("x"), withStatus("hi"))},
			want: []want{{OpUpdate, []string{"a"}}}},
		{name: "duplicate name refused, first kept", first: nil,
			second:  []*corev1.Pod{pod("a"), pod("a", withUID("other"))},
			want:    []want{{OpAdd, []string{"a"}}},
			refused: 1},
		{name: "emission order REMOVE ADD UPDATE DELETE RECONCILE", first: base[:4],
			second: []*corev1.Pod{pod("e"), pod("b", withStatus("s")), pod("c", withDeletion), pod("d", withImage("x"))},
			want: []want{{OpRemove, []string{"a"}}, {OpAdd, []string{"e"}}, {OpUpdate, []string{"d"}},
				{OpDelete, []string{"c"}}, {OpReconcile, []string{"b"}}}},
		{name: "emptied source removes everything", first: base[:2], second: []*corev1.Pod{},
			want: []want{{OpRemove, []string{"a", "b"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New()
			if tt.first != nil {
				s.Merge("file", tt.first)
			} else {
				s.Merge("file", []*corev1.Pod{})
			}
			ups, refused := s.Merge("file", tt.second)
			got := summarize(ups)
			for i := range got {
				sortStrings(got[i].names)
			}
			if len(got) != len(tt.want) || (len(got) > 0 && !reflect.DeepEqual(got, tt.want)) {
				t.Fatalf("updates = %v, want %v", got, tt.want)
			}
			if len(refused) != tt.refused {
				t.Fatalf("refused %d pods, want %d: %v", len(refused), tt.refused, refused)
			}
			for _, r := range refused {
				if r.Reason == "" || r.Source != "file" {
					t.Errorf("refusal without reason or source: %+v", r)
				}
			}
		})
	}
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

func TestFirstSetSignalsReadiness(t *testing.T) {
	s := New()
	if s.Seen("http") {
		t.Fatal("seen before any set")
	}
	ups, _ := s.Merge("http", nil)
	if len(ups) != 1 || ups[0].Op != OpAdd || len(ups[0].Pods) != 0 || ups[0].Source != "http" {
		t.Fatalf("first empty set gave %v, want one empty ADD", summarize(ups))
	}
	if !s.Seen("http") {
		t.Fatal("not seen after its first set")
	}
	if ups, _ := s.Merge("http", nil); len(ups) != 0 {
		t.Fatalf("second empty set gave %v", summarize(ups))
	}
}

func TestAnnotationsAndCopies(t *testing.T) {
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC))
	s := New(WithClock(clk))
	in := pod("a")
	ups, _ := s.Merge("file", []*corev1.Pod{in})
	if _, ok := in.Annotations[podsource.SourceAnnotation]; ok {
		t.Fatal("Merge wrote to its input")
	}
	got := ups[0].Pods[0]
	if got.Annotations[podsource.SourceAnnotation] != "file" || got.Annotations[podsource.FirstSeenAnnotation] != "2026-01-02T03:04:05.000000006Z" {
		t.Fatalf("annotations = %v", got.Annotations)
	}
	// Consumers own what they get.
	got.Spec.Containers[0].Image = "changed"
	got.Annotations["a"] = "changed"
	if ups, _ := s.Merge("file", []*corev1.Pod{pod("a")}); len(ups) != 0 {
		t.Fatalf("changing a handed-out pod changed the storage: %v", summarize(ups))
	}
	// An update keeps the first-seen time and carries the new spec.
	clk.SetTime(clk.Now().Add(time.Hour))
	ups, _ = s.Merge("file", []*corev1.Pod{pod("a", withImage("nginx"))})
	up := ups[0].Pods[0]
	if up.Annotations[podsource.FirstSeenAnnotation] != "2026-01-02T03:04:05.000000006Z" || up.Spec.Containers[0].Image != "nginx" {
		t.Fatalf("update = %v %s", up.Annotations, up.Spec.Containers[0].Image)
	}
	snap := s.Snapshot()
	if len(snap) != 1 || snap[0].Op != OpSet || len(snap[0].Pods) != 1 || snap[0].Pods[0].Spec.Containers[0].Image != "nginx" {
		t.Fatalf("snapshot = %v", summarize(snap))
	}
	snap[0].Pods[0].Name = "mutated"
	if l := s.List(); l[0].Pod.Name != "a" || l[0].LastOp != OpUpdate || l[0].Source != "file" {
		t.Fatalf("list = %+v", l[0])
	}
}

func TestSourcesAreIndependent(t *testing.T) {
	s := New()
	s.Merge("file", []*corev1.Pod{pod("a")})
	ups, _ := s.Merge("api", []*corev1.Pod{pod("b")})
	if w := summarize(ups); len(w) != 1 || w[0].op != OpAdd || w[0].names[0] != "b" {
		t.Fatalf("api set = %v", w)
	}
	ups, _ = s.Merge("api", nil)
	if w := summarize(ups); len(w) != 1 || w[0].op != OpRemove || w[0].names[0] != "b" {
		t.Fatalf("emptied api set = %v", w)
	}
	if s.Count("file") != 1 || s.Count("api") != 0 {
		t.Fatalf("counts file=%d api=%d", s.Count("file"), s.Count("api"))
	}
}
