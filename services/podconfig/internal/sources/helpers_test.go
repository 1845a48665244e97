package sources

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/controlplane"
)

func TestMain(m *testing.M) { os.Exit(controlplane.Main(m)) }

const patience = 60 * time.Second

// sets records every set a source delivers.
type sets struct {
	mu     sync.Mutex
	all    [][]*corev1.Pod
	source string
}

func newSets() *sets { return &sets{} }

func (s *sets) sink(source string, pods []*corev1.Pod) {
	s.mu.Lock()
	s.source = source
	s.all = append(s.all, pods)
	s.mu.Unlock()
}

func (s *sets) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.all)
}

func (s *sets) last() []*corev1.Pod {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.all) == 0 {
		return nil
	}
	return s.all[len(s.all)-1]
}

// waitFor waits until the latest set satisfies cond, calling poke (if any)
// while it waits, e.g. to step a fake clock.
func (s *sets) waitFor(t *testing.T, what string, cond func([]*corev1.Pod) bool, poke func()) []*corev1.Pod {
	t.Helper()
	var got []*corev1.Pod
	testenv.Eventually(t, what, patience, func() error {
		if p := s.last(); s.count() > 0 && cond(p) {
			got = p
			return nil
		}
		if poke != nil {
			poke()
		}
		return fmt.Errorf("last set: %s", podNames(s.last()))
	})
	return got
}

func podNames(pods []*corev1.Pod) string {
	var n []string
	for _, p := range pods {
		n = append(n, p.Namespace+"/"+p.Name)
	}
	slices.Sort(n)
	return strings.Join(n, ",")
}

func hasNames(want ...string) func([]*corev1.Pod) bool {
	slices.Sort(want)
	return func(p []*corev1.Pod) bool { return podNames(p) == strings.Join(want, ",") }
}

// reports records Reporter calls.
type reports struct {
	mu   sync.Mutex
	errs []string
	oks  int
}

func (r *reports) Error(source, where string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf("%s %s: %v", source, where, err))
}

func (r *reports) OK(string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.oks++
}

func (r *reports) find(sub ...string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.errs {
		ok := true
		for _, s := range sub {
			ok = ok && strings.Contains(e, s)
		}
		if ok {
			return true
		}
	}
	return false
}

func (r *reports) waitFor(t *testing.T, sub ...string) {
	t.Helper()
	testenv.Eventually(t, fmt.Sprintf("a report containing %q", sub), patience, func() error {
		if r.find(sub...) {
			return nil
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		return fmt.Errorf("got %q", r.errs)
	})
}

func podManifest(name, image string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\nspec:\n  containers:\n  - name: c\n    image: %s\n", name, image)
}
