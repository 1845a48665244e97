package merge

import (
	"cmp"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/podsource"
)

// Op is the kind of an update, with the kubelet's meanings.
type Op int

// The operations, in the order Merge emits them (SET only appears in snapshots).
const (
	OpRemove Op = iota + 1
	OpAdd
	OpUpdate
	OpDelete
	OpReconcile
	OpSet
)

var opNames = map[Op]string{OpRemove: "REMOVE", OpAdd: "ADD", OpUpdate: "UPDATE", OpDelete: "DELETE", OpReconcile: "RECONCILE", OpSet: "SET"}

func (o Op) String() string {
	if n, ok := opNames[o]; ok {
		return n
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// localAnnotations are the annotations the kubelet keeps on pods itself.
var localAnnotations = []string{podsource.SourceAnnotation, podsource.MirrorAnnotation, podsource.FirstSeenAnnotation}

// Update is one operation on pods of one source.
type Update struct {
	Op     Op
	Source string
	Pods   []*corev1.Pod
}

// Refusal is a pod left out of a set, and why.
type Refusal struct {
	Source string
	Pod    *corev1.Pod
	Reason string
}

type entry struct {
	pod    *corev1.Pod
	lastOp Op
	// ref is the source's object last merged into pod. Sources never change
	// an object they handed in, so the same pointer again means no change
	// and the comparison is skipped: a re-sent set of 10,000 unchanged pods
	// costs map lookups, not 10,000 deep comparisons.
	ref *corev1.Pod
}

// Storage holds the current pods of every source. It is safe for concurrent
// use; Merge calls are serialised so updates come out in a total order.
type Storage struct {
	mu    sync.Mutex
	clock clock.PassiveClock
	pods  map[string]map[types.UID]*entry
	seen  map[string]bool
}

// Option configures a Storage.
type Option func(*Storage)

// WithClock sets the clock of the config.seen annotation (tests).
func WithClock(c clock.PassiveClock) Option { return func(s *Storage) { s.clock = c } }

// New returns an empty Storage.
func New(opts ...Option) *Storage {
	s := &Storage{clock: clock.RealClock{}, pods: map[string]map[types.UID]*entry{}, seen: map[string]bool{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Merge replaces the pods of source with pods and returns the resulting
// updates in emission order, plus the pods refused as duplicates. pods are
// only read, so a source may hand in the same objects again and again; what
// the storage keeps and hands out are its own deep copies. A source must
// not modify a pod after handing it in: it hands in a new object instead.
//
// The first set of a source that yields no ADD, UPDATE or DELETE still yields
// an empty ADD, so a consumer learns the source is ready, as upstream does.
func (s *Storage) Merge(source string, pods []*corev1.Pod) ([]Update, []Refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()

	firstSet := !s.seen[source]
	s.seen[source] = true
	old := s.pods[source]
	cur := make(map[types.UID]*entry, len(pods))
	var adds, updates, deletes, removes, reconciles []*corev1.Pod
	var refused []Refusal

	type fullName struct{ namespace, name string }
	names := make(map[fullName]bool, len(pods))
	for _, ref := range pods {
		full := fullName{ref.Namespace, ref.Name}
		if names[full] {
			refused = append(refused, Refusal{Source: source, Pod: ref.DeepCopy(),
				Reason: fmt.Sprintf("duplicate pod name %q in namespace %q from source %s", ref.Name, ref.Namespace, source)})
			continue
		}
		names[full] = true
		if e, ok := old[ref.UID]; ok {
			cur[ref.UID] = e
			if e.ref == ref {
				continue
			}
			e.ref = ref
			needUpdate, needReconcile, needDelete := checkAndUpdate(e.pod, ref, source)
			switch {
			case needUpdate:
				e.lastOp = OpUpdate
				updates = append(updates, e.pod)
			case needReconcile:
				e.lastOp = OpReconcile
				reconciles = append(reconciles, e.pod)
			case needDelete:
				e.lastOp = OpDelete
				deletes = append(deletes, e.pod)
			}
			continue
		}
		if _, dup := cur[ref.UID]; dup {
			// Same UID twice under different names: the first one stays.
			refused = append(refused, Refusal{Source: source, Pod: ref.DeepCopy(),
				Reason: fmt.Sprintf("duplicate pod UID %s from source %s", ref.UID, source)})
			continue
		}
		p := ref.DeepCopy()
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[podsource.SourceAnnotation] = source
		p.Annotations[podsource.FirstSeenAnnotation] = s.clock.Now().Format(time.RFC3339Nano)
		cur[ref.UID] = &entry{pod: p, lastOp: OpAdd, ref: ref}
		adds = append(adds, p)
	}
	for uid, e := range old {
		if _, ok := cur[uid]; !ok {
			removes = append(removes, e.pod)
		}
	}
	s.pods[source] = cur

	var out []Update
	emit := func(op Op, ps []*corev1.Pod) {
		if len(ps) > 0 {
			out = append(out, Update{Op: op, Source: source, Pods: copyPods(ps)})
		}
	}
	emit(OpRemove, removes)
	emit(OpAdd, adds)
	emit(OpUpdate, updates)
	emit(OpDelete, deletes)
	if firstSet && len(adds) == 0 && len(updates) == 0 && len(deletes) == 0 {
		out = append(out, Update{Op: OpAdd, Source: source, Pods: []*corev1.Pod{}})
	}
	emit(OpReconcile, reconciles)
	return out, refused
}

// Seen reports whether source has delivered at least one full set.
func (s *Storage) Seen(source string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[source]
}

// Count is the number of pods source holds.
func (s *Storage) Count(source string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pods[source])
}

// Snapshot returns one SET per source seen so far, sources in name order and
// pods sorted by namespace and name, all deep copies.
func (s *Storage) Snapshot() []Update {
	s.mu.Lock()
	defer s.mu.Unlock()
	sources := make([]string, 0, len(s.seen))
	for src := range s.seen {
		sources = append(sources, src)
	}
	slices.Sort(sources)
	out := make([]Update, 0, len(sources))
	for _, src := range sources {
		ps := make([]*corev1.Pod, 0, len(s.pods[src]))
		for _, e := range s.pods[src] {
			ps = append(ps, e.pod.DeepCopy())
		}
		sortPods(ps)
		out = append(out, Update{Op: OpSet, Source: src, Pods: ps})
	}
	return out
}

// PodInfo is a pod with where it came from and the last operation on it.
type PodInfo struct {
	Source string
	LastOp Op
	Pod    *corev1.Pod
}

// List returns every current pod, sorted by namespace, name and source.
func (s *Storage) List() []PodInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []PodInfo
	for src, m := range s.pods {
		for _, e := range m {
			out = append(out, PodInfo{Source: src, LastOp: e.lastOp, Pod: e.pod.DeepCopy()})
		}
	}
	slices.SortFunc(out, func(a, b PodInfo) int {
		return cmp.Or(cmp.Compare(a.Pod.Namespace, b.Pod.Namespace), cmp.Compare(a.Pod.Name, b.Pod.Name), cmp.Compare(a.Source, b.Source))
	})
	return out
}

func sortPods(ps []*corev1.Pod) {
	slices.SortFunc(ps, func(a, b *corev1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}

func copyPods(ps []*corev1.Pod) []*corev1.Pod {
	out := make([]*corev1.Pod, len(ps))
	for i, p := range ps {
		out[i] = p.DeepCopy()
	}
	return out
}

func isLocal(key string) bool {
	return slices.Contains(localAnnotations, key)
}

// annotationsEqual compares annotations ignoring the local ones.
func annotationsEqual(existing, candidate map[string]string) bool {
	for k, v := range candidate {
		if isLocal(k) {
			continue
		}
		if ev, ok := existing[k]; !ok || ev != v {
			return false
		}
	}
	for k := range existing {
		if isLocal(k) {
			continue
		}
		if _, ok := candidate[k]; !ok {
			return false
		}
	}
	return true
}

func differSemantically(existing, ref *corev1.Pod) bool {
	return !(reflect.DeepEqual(existing.Spec, ref.Spec) &&
		reflect.DeepEqual(existing.Labels, ref.Labels) &&
		reflect.DeepEqual(existing.DeletionTimestamp, ref.DeletionTimestamp) &&
		reflect.DeepEqual(existing.DeletionGracePeriodSeconds, ref.DeletionGracePeriodSeconds) &&
		annotationsEqual(existing.Annotations, ref.Annotations))
}

// checkAndUpdate folds ref into existing and says what kind of change it
// was. ref is only read: what existing keeps of it is deep-copied first.
func checkAndUpdate(existing, ref *corev1.Pod, source string) (needUpdate, needReconcile, needDelete bool) {
	if !differSemantically(existing, ref) {
		if !reflect.DeepEqual(existing.Status, ref.Status) {
			existing.Status = *ref.Status.DeepCopy()
			needReconcile = true
		}
		return
	}
	ref = ref.DeepCopy()
	if ref.Annotations == nil {
		ref.Annotations = map[string]string{}
	}
	ref.Annotations[podsource.SourceAnnotation] = source
	ref.Annotations[podsource.FirstSeenAnnotation] = existing.Annotations[podsource.FirstSeenAnnotation]
	existing.Spec = ref.Spec
	existing.Labels = ref.Labels
	existing.DeletionTimestamp = ref.DeletionTimestamp
	existing.DeletionGracePeriodSeconds = ref.DeletionGracePeriodSeconds
	existing.Generation = ref.Generation
	existing.Status = ref.Status
	ann := make(map[string]string, len(ref.Annotations)+len(localAnnotations))
	for k, v := range ref.Annotations {
		ann[k] = v
	}
	for _, k := range localAnnotations {
		if v, ok := existing.Annotations[k]; ok {
			ann[k] = v
		}
	}
	existing.Annotations = ann
	if ref.DeletionTimestamp != nil {
		needDelete = true
	} else {
		needUpdate = true
	}
	return
}
