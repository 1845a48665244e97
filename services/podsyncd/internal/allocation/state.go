package allocation

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/microlet/microlet/internal/statefile"
)

// PodResources are one pod's resources by container name, plus its
// pod-level resources (nil when it has none).
type PodResources struct {
	Containers map[string]corev1.ResourceRequirements `json:"containers,omitempty"`
	Pod        *corev1.ResourceRequirements           `json:"pod,omitempty"`
}

// checkpoint is the file's content.
type checkpoint struct {
	Version   int                        `json:"version"`
	Allocated map[types.UID]PodResources `json:"allocated"`
	Actuated  map[types.UID]PodResources `json:"actuated"`
}

const checkpointVersion = 1

// CheckpointFile is the checkpoint's name under its directory.
const CheckpointFile = "pod_resources_state.json"

// State holds the allocated and actuated resources and the resize
// conditions; its resources are written to the checkpoint file before each
// change returns. The zero value is not usable; use Open.
type State struct {
	path string // "" keeps everything in memory

	mu        sync.Mutex
	allocated map[types.UID]PodResources
	actuated  map[types.UID]PodResources
	conds     map[types.UID]*conditions
	backfill  map[types.UID]bool
}

// Open reads the checkpoint in dir (made if missing); "" keeps the state in
// memory only. Temporary files a crash left are swept. A checkpoint that
// does not decode (or has another version) is moved aside
// (statefile.Quarantine, a Warning on log) and the state starts empty: the
// sync loop then checkpoints each pod's resources from its current spec as
// it admits it, as for a pod it never saw, so a resize that was under way
// counts as the allocation. Only a file that cannot be read or moved is an
// error naming it.
func Open(dir string, log *slog.Logger) (*State, error) {
	s := &State{
		allocated: map[types.UID]PodResources{}, actuated: map[types.UID]PodResources{},
		conds: map[types.UID]*conditions{}, backfill: map[types.UID]bool{},
	}
	if dir == "" {
		return s, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("allocation checkpoint dir: %w", err)
	}
	if _, err := statefile.Sweep(dir); err != nil {
		return nil, fmt.Errorf("allocation checkpoint dir: %w", err)
	}
	s.path = filepath.Join(dir, CheckpointFile)
	b, err := os.ReadFile(s.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("read allocation checkpoint %s: %w", s.path, err)
	}
	var cp checkpoint
	bad := json.Unmarshal(b, &cp)
	if bad == nil && cp.Version != checkpointVersion {
		bad = fmt.Errorf("version %d, want %d", cp.Version, checkpointVersion)
	}
	if bad != nil {
		if _, err := statefile.Quarantine(log, s.path, fmt.Errorf("allocation checkpoint: %w", bad)); err != nil {
			return nil, err
		}
		return s, nil
	}
	if cp.Allocated != nil {
		s.allocated = cp.Allocated
	}
	if cp.Actuated != nil {
		s.actuated = cp.Actuated
	}
	return s, nil
}

// saveLocked writes the checkpoint crash-safely (statefile: temp file,
// fsync, rename, fsync dir).
func (s *State) saveLocked() error {
	if s.path == "" {
		return nil
	}
	b, err := json.Marshal(checkpoint{Version: checkpointVersion, Allocated: s.allocated, Actuated: s.actuated})
	if err != nil {
		return err
	}
	if err := statefile.WriteFile(s.path, b, 0o600); err != nil {
		return fmt.Errorf("allocation checkpoint: %w", err)
	}
	return nil
}

// IsResizable says whether a container's resources can change in place:
// regular and init containers (InPlacePodVerticalScalingInitContainers is on
// by default in 1.36), not ephemeral ones, as the kubelet's
// IsResizableContainer. A non-restartable init container is only ever
// resized in its allocation: it does not run once the pod is initialized.
func IsResizable(_ *corev1.Container, _ bool) bool { return true }

// FromPod is the allocation a pod's spec asks for.
func FromPod(pod *corev1.Pod) PodResources {
	r := PodResources{Containers: map[string]corev1.ResourceRequirements{}}
	if pod.Spec.Resources != nil {
		r.Pod = pod.Spec.Resources.DeepCopy()
	}
	for i := range pod.Spec.InitContainers {
		if c := &pod.Spec.InitContainers[i]; IsResizable(c, true) {
			r.Containers[c.Name] = *c.Resources.DeepCopy()
		}
	}
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		r.Containers[c.Name] = *c.Resources.DeepCopy()
	}
	return r
}

// Allocated is the pod's allocation, if it has one.
func (s *State) Allocated(uid types.UID) (PodResources, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.allocated[uid]
	return r, ok
}

// SetAllocated checkpoints the pod's spec resources as its allocation.
func (s *State) SetAllocated(pod *corev1.Pod) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.allocated[pod.UID] = FromPod(pod)
	return s.saveLocked()
}

// PodFromAllocation is the pod with its containers' resources (and pod-level
// resources) replaced by the allocation, a copy only when they differ, and
// whether they did (the kubelet's UpdatePodFromAllocation). A pod without an
// allocation comes back as is.
func (s *State) PodFromAllocation(pod *corev1.Pod) (*corev1.Pod, bool) {
	alloc, ok := s.Allocated(pod.UID)
	if !ok {
		return pod, false
	}
	return ApplyAllocation(pod, alloc)
}

// ApplyAllocation overwrites pod's resources with alloc (see PodFromAllocation).
func ApplyAllocation(pod *corev1.Pod, alloc PodResources) (*corev1.Pod, bool) {
	out := pod
	copied := false
	cp := func() {
		if !copied {
			out, copied = pod.DeepCopy(), true
		}
	}
	if !apiequality.Semantic.DeepEqual(pod.Spec.Resources, alloc.Pod) {
		cp()
		out.Spec.Resources = alloc.Pod.DeepCopy()
	}
	for _, list := range []*[]corev1.Container{&pod.Spec.InitContainers, &pod.Spec.Containers} {
		for i := range *list {
			c := &(*list)[i]
			a, ok := alloc.Containers[c.Name]
			if !ok || apiequality.Semantic.DeepEqual(c.Resources, a) {
				continue
			}
			cp()
			target := &out.Spec.Containers
			if list == &pod.Spec.InitContainers {
				target = &out.Spec.InitContainers
			}
			(*target)[i].Resources = *a.DeepCopy()
		}
	}
	return out, copied
}

// Actuated is what the runtime was last given for a container.
func (s *State) Actuated(uid types.UID, name string) (corev1.ResourceRequirements, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.actuated[uid].Containers[name]
	return r, ok
}

// SetActuated checkpoints what the runtime was given for a container.
func (s *State) SetActuated(uid types.UID, name string, r corev1.ResourceRequirements) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.actuated[uid]
	if p.Containers == nil {
		p.Containers = map[string]corev1.ResourceRequirements{}
	}
	if old, ok := p.Containers[name]; ok && apiequality.Semantic.DeepEqual(old, r) {
		return nil
	}
	p.Containers[name] = *r.DeepCopy()
	s.actuated[uid] = p
	return s.saveLocked()
}

// Remove forgets a removed pod.
func (s *State) Remove(uid types.UID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conds, uid)
	delete(s.backfill, uid)
	_, a := s.allocated[uid]
	_, b := s.actuated[uid]
	if !a && !b {
		return nil
	}
	delete(s.allocated, uid)
	delete(s.actuated, uid)
	return s.saveLocked()
}

// RemoveOrphans forgets every pod not in keep.
func (s *State) RemoveOrphans(keep map[types.UID]bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for _, m := range []map[types.UID]PodResources{s.allocated, s.actuated} {
		for uid := range m {
			if !keep[uid] {
				delete(m, uid)
				changed = true
			}
		}
	}
	for uid := range s.conds {
		if !keep[uid] {
			delete(s.conds, uid)
			delete(s.backfill, uid)
		}
	}
	if !changed {
		return nil
	}
	return s.saveLocked()
}
