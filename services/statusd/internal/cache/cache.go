package cache

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/services/statusd/internal/podstatus"
	"github.com/microlet/microlet/services/statusd/internal/store"
)

// ErrNotFound is returned for a pod UID with no cached status.
var ErrNotFound = errors.New("no status cached for pod")

// ErrInvalid wraps errors about bad input other than illegal transitions.
var ErrInvalid = errors.New("invalid request")

// Entry is one pod's cached status. Values handed out are copies.
type Entry struct {
	// UID is the key: the pod's UID as its owner on the node knows it.
	UID       string
	Namespace string
	Name      string
	// Pod is the pod (metadata and spec) of the last change.
	Pod *corev1.Pod
	// Status is the accepted, normalised status.
	Status corev1.PodStatus
	// Version counts accepted changes.
	Version uint64
	// SyncedVersion is the latest version known to be in the API.
	SyncedVersion uint64
	// Reclaimed is set once the node reported the pod's resources released.
	Reclaimed bool
	// Changed is when the oldest change not yet in the API was accepted.
	Changed time.Time
}

func (e *Entry) clone() Entry {
	c := *e
	c.Status = *e.Status.DeepCopy()
	return c // Pod is never mutated after it is stored, so sharing it is safe.
}

// Event is one change seen by a watcher.
type Event struct {
	Entry   Entry
	Removed bool
}

type podState struct {
	mu      sync.Mutex // serialises writers of this pod, held across the store write
	e       Entry      // guarded by Cache.mu
	present bool       // guarded by Cache.mu
}

// Cache is the status cache. It is safe for concurrent use.
type Cache struct {
	store    *store.Store
	clock    clock.PassiveClock
	onChange func(uid string)

	mu       sync.RWMutex
	pods     map[string]*podState
	byName   map[string]map[string]struct{} // "namespace/name" -> UIDs
	watchers map[*watcher]struct{}
}

// Option configures a Cache.
type Option func(*Cache)

// WithClock sets the clock used for transition and start times.
func WithClock(c clock.PassiveClock) Option { return func(x *Cache) { x.clock = c } }

// WithOnChange registers f, called (outside locks) with the UID of every pod
// whose status changed or was marked reclaimed; the syncer queues the pod.
func WithOnChange(f func(uid string)) Option { return func(x *Cache) { x.onChange = f } }

// New returns an empty cache persisting to st.
func New(st *store.Store, opts ...Option) *Cache {
	c := &Cache{store: st, clock: clock.RealClock{}, pods: map[string]*podState{}, byName: map[string]map[string]struct{}{}, watchers: map[*watcher]struct{}{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Load fills the cache from the store, after a restart. Every loaded status
// counts as not yet synced, so the syncer checks each against the API.
func (c *Cache) Load() (int, error) {
	recs, err := c.store.Load()
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range recs {
		e := Entry{UID: r.UID, Namespace: r.Namespace, Name: r.Name, Version: r.Version, Reclaimed: r.Reclaimed, Changed: r.Changed}
		pod := &corev1.Pod{}
		// A record that does not decode is moved aside: the node reports
		// that pod's status again on its next sync.
		if err := pod.Unmarshal(r.Pod); err != nil {
			if qerr := c.store.Quarantine(r.UID, fmt.Sprintf("stored pod does not decode: %v", err)); qerr != nil {
				return n, qerr
			}
			continue
		}
		if err := e.Status.Unmarshal(r.Status); err != nil {
			if qerr := c.store.Quarantine(r.UID, fmt.Sprintf("stored status does not decode: %v", err)); qerr != nil {
				return n, qerr
			}
			continue
		}
		n++
		e.Pod = pod
		if e.Changed.IsZero() {
			e.Changed = c.clock.Now()
		}
		c.pods[r.UID] = &podState{e: e, present: true}
		c.indexLocked(e.Namespace, e.Name, e.UID, true)
	}
	return n, nil
}

// lockPod returns the pod's state with its writer lock held, creating it when
// create is set; nil when absent.
func (c *Cache) lockPod(uid string, create bool) *podState {
	for {
		c.mu.Lock()
		ps, ok := c.pods[uid]
		if !ok {
			if !create {
				c.mu.Unlock()
				return nil
			}
			ps = &podState{}
			c.pods[uid] = ps
		}
		c.mu.Unlock()
		ps.mu.Lock()
		c.mu.RLock()
		cur, still := c.pods[uid]
		c.mu.RUnlock()
		if still && cur == ps {
			return ps
		}
		ps.mu.Unlock() // removed while we waited; start again
	}
}

// dropIfEmpty removes a state that never got a status (a refused first call).
func (c *Cache) dropIfEmpty(uid string, ps *podState) {
	c.mu.Lock()
	if !ps.present && c.pods[uid] == ps {
		delete(c.pods, uid)
	}
	c.mu.Unlock()
}

func encode(e *Entry) (store.Record, error) {
	podOnly := e.Pod.DeepCopy()
	podOnly.Status = corev1.PodStatus{}
	pb, err := podOnly.Marshal()
	if err != nil {
		return store.Record{}, err
	}
	sb, err := e.Status.Marshal()
	if err != nil {
		return store.Record{}, err
	}
	return store.Record{UID: e.UID, Namespace: e.Namespace, Name: e.Name, Pod: pb, Status: sb, Version: e.Version, Reclaimed: e.Reclaimed, Changed: e.Changed}, nil
}

// commit persists next as the pod's new entry, publishes it, and returns its
// version. The caller holds ps.mu.
func (c *Cache) commit(ps *podState, next Entry) (uint64, error) {
	rec, err := encode(&next)
	if err != nil {
		return 0, fmt.Errorf("encode status: %w", err)
	}
	if err := c.store.Put(rec); err != nil {
		return 0, fmt.Errorf("persist status: %w", err)
	}
	c.mu.Lock()
	ps.e, ps.present = next, true
	c.indexLocked(next.Namespace, next.Name, next.UID, true)
	c.publishLocked(Event{Entry: next.clone()})
	c.mu.Unlock()
	if c.onChange != nil {
		c.onChange(next.UID)
	}
	return next.Version, nil
}

func (c *Cache) current(ps *podState) (Entry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return ps.e, ps.present
}

func validatePod(pod *corev1.Pod) error {
	var missing []string
	if pod.UID == "" {
		missing = append(missing, "metadata.uid")
	}
	if pod.Name == "" {
		missing = append(missing, "metadata.name")
	}
	if pod.Namespace == "" {
		missing = append(missing, "metadata.namespace")
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: pod: %s must be set", ErrInvalid, strings.Join(missing, ", "))
	}
	return nil
}

// update runs the common path of every status-changing call: fn builds the
// candidate from the current entry (present tells whether one exists), then the
// podstatus rules apply; an unchanged status keeps its version unless force.
func (c *Cache) update(pod *corev1.Pod, force bool, fn func(cur *Entry, present bool) (corev1.PodStatus, error)) (uint64, error) {
	uid := string(pod.UID)
	ps := c.lockPod(uid, true)
	defer ps.mu.Unlock()
	defer c.dropIfEmpty(uid, ps)
	cur, present := c.current(ps)
	candidate, err := fn(&cur, present)
	if err != nil {
		return cur.Version, err
	}
	old := &pod.Status
	if present {
		old = &cur.Status
	}
	now := c.clock.Now()
	st, err := podstatus.Prepare(pod, old, &candidate, now)
	if err != nil {
		return cur.Version, err
	}
	if present && !force && podstatus.EqualByKubelet(&cur.Status, &st) {
		return cur.Version, nil
	}
	next := cur
	next.UID, next.Namespace, next.Name = uid, pod.Namespace, pod.Name
	next.Pod = stripStatus(pod)
	next.Status = st
	next.Version = cur.Version + 1
	if !present || next.Changed.IsZero() || cur.SyncedVersion >= cur.Version {
		next.Changed = now
	}
	return c.commit(ps, next)
}

func stripStatus(pod *corev1.Pod) *corev1.Pod {
	p := pod.DeepCopy()
	p.Status = corev1.PodStatus{}
	return p
}

// SetPodStatus records status for pod. An illegal container transition is
// refused (podstatus.ErrIllegalTransition) and changes nothing.
func (c *Cache) SetPodStatus(pod *corev1.Pod, status *corev1.PodStatus) (uint64, error) {
	if err := validatePod(pod); err != nil {
		return 0, err
	}
	return c.update(pod, false, func(*Entry, bool) (corev1.PodStatus, error) {
		st := *status
		// The status manager stamps the generation of the spec the status
		// was computed from (PodObservedGenerationTracking, GA in 1.35).
		st.ObservedGeneration = pod.Generation
		return st, nil
	})
}

// TerminatePod marks the pod's unfinished containers as terminated and, for a
// pod from the API, its phase Failed unless already finished. It always
// writes a new version, like upstream's forced update.
func (c *Cache) TerminatePod(pod *corev1.Pod) (uint64, error) {
	if err := validatePod(pod); err != nil {
		return 0, err
	}
	return c.update(pod, true, func(cur *Entry, present bool) (corev1.PodStatus, error) {
		if present {
			return podstatus.Terminate(pod, &cur.Status), nil
		}
		return podstatus.Terminate(pod, &pod.Status), nil
	})
}

func (c *Cache) containerChange(uid, containerID string, fn func(pod *corev1.Pod, st *corev1.PodStatus, cs *corev1.ContainerStatus)) (uint64, error) {
	if uid == "" {
		return 0, fmt.Errorf("%w: pod_uid must be set", ErrInvalid)
	}
	if containerID == "" {
		return 0, fmt.Errorf("%w: container_id must be set", ErrInvalid)
	}
	c.mu.RLock()
	ps, ok := c.pods[uid]
	var pod *corev1.Pod
	if ok && ps.present {
		pod = ps.e.Pod
	}
	c.mu.RUnlock()
	if pod == nil {
		return 0, fmt.Errorf("%w: pod_uid %s", ErrNotFound, uid)
	}
	return c.update(pod, false, func(cur *Entry, present bool) (corev1.PodStatus, error) {
		if !present {
			return corev1.PodStatus{}, fmt.Errorf("%w: pod_uid %s", ErrNotFound, uid)
		}
		st := *cur.Status.DeepCopy()
		cs := podstatus.FindContainer(&st, containerID)
		if cs == nil {
			return st, fmt.Errorf("%w: container_id %s is not in the status of pod %s/%s", ErrNotFound, containerID, cur.Namespace, cur.Name)
		}
		fn(cur.Pod, &st, cs)
		return st, nil
	})
}

// SetContainerReadiness sets one container's readiness and recomputes the
// pod's ContainersReady and Ready conditions.
func (c *Cache) SetContainerReadiness(uid, containerID string, ready bool) (uint64, error) {
	// An unchanged flag leaves the status equal, which keeps the version.
	return c.containerChange(uid, containerID, func(pod *corev1.Pod, st *corev1.PodStatus, cs *corev1.ContainerStatus) {
		if cs.Ready == ready {
			return
		}
		cs.Ready = ready
		podstatus.ReadinessConditions(pod, st)
	})
}

// SetContainerStartup sets one container's started flag.
func (c *Cache) SetContainerStartup(uid, containerID string, started bool) (uint64, error) {
	return c.containerChange(uid, containerID, func(_ *corev1.Pod, _ *corev1.PodStatus, cs *corev1.ContainerStatus) {
		cs.Started = &started
	})
}

// ReportReclaimed records that the node released the pod's resources.
func (c *Cache) ReportReclaimed(uid string) error {
	if uid == "" {
		return fmt.Errorf("%w: pod_uid must be set", ErrInvalid)
	}
	ps := c.lockPod(uid, false)
	if ps == nil {
		return fmt.Errorf("%w: pod_uid %s", ErrNotFound, uid)
	}
	defer ps.mu.Unlock()
	cur, present := c.current(ps)
	if !present {
		return fmt.Errorf("%w: pod_uid %s", ErrNotFound, uid)
	}
	if cur.Reclaimed {
		return nil
	}
	cur.Reclaimed = true
	rec, err := encode(&cur)
	if err != nil {
		return err
	}
	if err := c.store.Put(rec); err != nil {
		return fmt.Errorf("persist: %w", err)
	}
	c.mu.Lock()
	ps.e.Reclaimed = true
	c.mu.Unlock()
	if c.onChange != nil {
		c.onChange(uid)
	}
	return nil
}

// Remove drops a pod's status (recreated or deleted from the API).
func (c *Cache) Remove(uid string) error {
	ps := c.lockPod(uid, false)
	if ps == nil {
		return nil
	}
	defer ps.mu.Unlock()
	if err := c.store.Delete(uid); err != nil {
		return fmt.Errorf("persist removal: %w", err)
	}
	c.mu.Lock()
	e, present := ps.e, ps.present
	delete(c.pods, uid)
	if present {
		c.indexLocked(e.Namespace, e.Name, uid, false)
		c.publishLocked(Event{Entry: Entry{UID: e.UID, Namespace: e.Namespace, Name: e.Name}, Removed: true})
	}
	c.mu.Unlock()
	return nil
}

// RemoveOrphaned drops every status whose UID is not in keep and returns the
// UIDs dropped, sorted.
func (c *Cache) RemoveOrphaned(keep []string) ([]string, error) {
	k := make(map[string]bool, len(keep))
	for _, u := range keep {
		k[u] = true
	}
	c.mu.RLock()
	var drop []string
	for uid := range c.pods {
		if !k[uid] {
			drop = append(drop, uid)
		}
	}
	c.mu.RUnlock()
	slices.Sort(drop)
	for _, uid := range drop {
		if err := c.Remove(uid); err != nil {
			return nil, err
		}
	}
	return drop, nil
}

// Get returns a copy of the pod's entry.
func (c *Cache) Get(uid string) (Entry, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	ps, ok := c.pods[uid]
	if !ok || !ps.present {
		return Entry{}, false
	}
	return ps.e.clone(), true
}

// List returns copies of every entry sorted by namespace and name.
func (c *Cache) List() []Entry {
	c.mu.RLock()
	out := make([]Entry, 0, len(c.pods))
	for _, ps := range c.pods {
		if ps.present {
			out = append(out, ps.e.clone())
		}
	}
	c.mu.RUnlock()
	sortEntries(out)
	return out
}

// UIDs returns the UIDs of every cached pod.
func (c *Cache) UIDs() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, len(c.pods))
	for uid, ps := range c.pods {
		if ps.present {
			out = append(out, uid)
		}
	}
	return out
}

func sortEntries(es []Entry) {
	slices.SortFunc(es, func(a, b Entry) int {
		if x := strings.Compare(a.Namespace, b.Namespace); x != 0 {
			return x
		}
		if x := strings.Compare(a.Name, b.Name); x != 0 {
			return x
		}
		return strings.Compare(a.UID, b.UID)
	})
}

// MarkSynced records that version of uid is in the API; it returns how many
// changes that write carried (more than one means changes coalesced).
func (c *Cache) MarkSynced(uid string, version uint64) (carried uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ps, ok := c.pods[uid]
	if !ok || !ps.present || ps.e.SyncedVersion >= version {
		return 0
	}
	carried = version - ps.e.SyncedVersion
	ps.e.SyncedVersion = version
	if version >= ps.e.Version {
		ps.e.Changed = time.Time{}
	}
	return carried
}

// ForgetSynced makes uid count as not synced, so it is sent again (reconcile).
func (c *Cache) ForgetSynced(uid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ps, ok := c.pods[uid]; ok {
		ps.e.SyncedVersion = 0
		if ps.e.Changed.IsZero() {
			ps.e.Changed = c.clock.Now()
		}
	}
}

func (c *Cache) indexLocked(ns, name, uid string, add bool) {
	key := ns + "/" + name
	set := c.byName[key]
	if add {
		if set == nil {
			set = map[string]struct{}{}
			c.byName[key] = set
		}
		set[uid] = struct{}{}
		return
	}
	delete(set, uid)
	if len(set) == 0 {
		delete(c.byName, key)
	}
}

// UIDsByName returns the UIDs cached under namespace/name: usually one, two
// while a recreated pod's old status is still cached.
func (c *Cache) UIDsByName(namespace, name string) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var out []string
	for uid := range c.byName[namespace+"/"+name] {
		out = append(out, uid)
	}
	return out
}

// StaticPodRunning reports whether a static pod namespace/name with config
// hash has a status here that the node has not reported reclaimed: the node
// runs it, or is still terminating it after it left the config or changed.
// Its mirror pod stays until then.
func (c *Cache) StaticPodRunning(namespace, name, hash string) bool {
	if hash == "" {
		return false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	for uid := range c.byName[namespace+"/"+name] {
		ps := c.pods[uid]
		if ps == nil || !ps.present || ps.e.Reclaimed || ps.e.Pod == nil {
			continue
		}
		if podsource.IsStatic(ps.e.Pod) && ps.e.Pod.Annotations[podsource.HashAnnotation] == hash {
			return true
		}
	}
	return false
}
