package mirror

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/microlet/microlet/internal/podsource"
	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
	podconfigclient "github.com/microlet/microlet/services/podconfig/client"
)

// DefaultResyncPeriod is how often the mirror pods are compared with the
// static pods even without any event.
const DefaultResyncPeriod = 10 * time.Second

// Manager keeps the mirror pods in step with the static pods.
type Manager struct {
	client    kubernetes.Interface
	podconfig podconfigv1.PodConfigServiceClient
	node      string
	informer  toolscache.SharedIndexInformer
	lister    corelisters.PodLister
	log       *slog.Logger
	period    time.Duration
	ops       *prometheus.CounterVec
	running   RunningFunc

	trigger chan struct{}

	mu       sync.Mutex
	desired  map[string]map[string]*corev1.Pod // source -> "ns/name" -> static pod
	snapshot bool                              // a full snapshot from podconfig has arrived
	nodeUID  types.UID
}

// RunningFunc reports whether the static pod namespace/name whose config
// hash is hash still runs on the node: started and not yet cleaned up after
// its termination.
type RunningFunc func(namespace, name, hash string) bool

// Option configures a Manager.
type Option func(*Manager)

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(m *Manager) { m.log = l } }

// WithResyncPeriod sets the period of the full comparison.
func WithResyncPeriod(d time.Duration) Option { return func(m *Manager) { m.period = d } }

// WithRunning tells the manager which static pods still run on the node.
// A mirror pod whose static pod left the config or changed is kept until
// its static pod is no longer running, as the kubelet keeps it while the
// pod worker terminates the old pod (the mirror pod shows the old pod for
// its grace period). Without it the mirror pod goes at once.
func WithRunning(f RunningFunc) Option { return func(m *Manager) { m.running = f } }

// WithRegisterer registers the manager's metrics on reg.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(m *Manager) { reg.MustRegister(m.ops) }
}

// New returns a manager for node; informer holds the node's API pods.
func New(client kubernetes.Interface, pc podconfigv1.PodConfigServiceClient, node string, informer toolscache.SharedIndexInformer, opts ...Option) *Manager {
	m := &Manager{
		client: client, podconfig: pc, node: node, informer: informer,
		lister:  corelisters.NewPodLister(informer.GetIndexer()),
		log:     slog.Default(),
		period:  DefaultResyncPeriod,
		trigger: make(chan struct{}, 1),
		desired: map[string]map[string]*corev1.Pod{},
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "statusd_mirror_pod_operations_total", Help: "Mirror pod creations and deletions.",
		}, []string{"op"}),
	}
	for _, o := range opts {
		o(m)
	}
	poke := func(obj any) {
		if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if p, ok := obj.(*corev1.Pod); ok && podsource.IsMirror(p) {
			m.poke()
		}
	}
	_, _ = informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: poke, UpdateFunc: func(_, o any) { poke(o) }, DeleteFunc: poke,
	})
	return m
}

// Poke asks for a reconciliation pass soon (a static pod finished).
func (m *Manager) Poke() { m.poke() }

func (m *Manager) poke() {
	select {
	case m.trigger <- struct{}{}:
	default:
	}
}

// Run follows podconfig and reconciles mirror pods until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	go m.follow(ctx)
	if !toolscache.WaitForCacheSync(ctx.Done(), m.informer.HasSynced) {
		return
	}
	t := time.NewTicker(m.period)
	defer t.Stop()
	for {
		if err := m.Reconcile(ctx); err != nil && ctx.Err() == nil {
			m.log.Warn("mirror pods not reconciled; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-m.trigger:
		case <-t.C:
		}
	}
}

// follow keeps a Watch on podconfig open (resumed after the last sequence,
// with backoff between attempts) and reconciles after every event.
func (m *Manager) follow(ctx context.Context) {
	w := &podconfigclient.Watcher{Client: m.podconfig, Log: m.log, Handle: func(ev podconfigclient.Event) {
		m.Apply(ev)
		m.poke()
	}}
	w.Run(ctx)
}

// Apply folds one podconfig Watch event into the desired static pods.
// Updates from the "api" source are ignored: they are API pods, including
// the mirror pods themselves.
func (m *Manager) Apply(ev podconfigclient.Event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if ev.Resync {
		m.desired = map[string]map[string]*corev1.Pod{}
		m.snapshot = true
	}
	for _, u := range ev.Updates {
		src := u.Source
		if src == podsource.APISource {
			continue
		}
		pods := map[string]*corev1.Pod{}
		for _, p := range u.Pods {
			if podsource.IsMirror(p) {
				continue
			}
			pods[p.Namespace+"/"+p.Name] = p
		}
		set := m.desired[src]
		if set == nil {
			set = map[string]*corev1.Pod{}
			m.desired[src] = set
		}
		switch u.Op {
		case podconfigv1.Operation_OPERATION_SET:
			m.desired[src] = pods
		case podconfigv1.Operation_OPERATION_REMOVE:
			for k := range pods {
				delete(set, k)
			}
		default: // ADD, UPDATE, DELETE, RECONCILE: the pod exists with this content
			maps.Copy(set, pods)
		}
	}
}

// Desired returns the static pods by "namespace/name" (ready is false until
// podconfig's first snapshot arrived).
func (m *Manager) Desired() (pods map[string]*corev1.Pod, ready bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]*corev1.Pod{}
	for _, src := range slices.Sorted(maps.Keys(m.desired)) {
		maps.Copy(out, m.desired[src])
	}
	return out, m.snapshot
}

// Reconcile makes one pass: create missing mirror pods, replace outdated
// ones and ones being deleted, delete the ones without a static pod. A
// mirror pod whose static pod still runs on the node (WithRunning) stays
// until that pod has finished, whatever the config says now.
func (m *Manager) Reconcile(ctx context.Context) error {
	want, ready := m.Desired()
	if !ready {
		return nil // without podconfig's snapshot we do not know which mirrors are orphans
	}
	var errs []error
	for _, key := range slices.Sorted(maps.Keys(want)) {
		sp := want[key]
		hash := sp.Annotations[podsource.HashAnnotation]
		cur, err := m.lister.Pods(sp.Namespace).Get(sp.Name)
		switch {
		case apierrors.IsNotFound(err):
			errs = append(errs, m.create(ctx, sp))
		case err != nil:
			errs = append(errs, err)
		case !podsource.IsMirror(cur):
			m.log.Warn("an API pod that is not a mirror pod has the static pod's name; leaving it", "pod", key)
		case cur.Annotations[podsource.MirrorAnnotation] != hash:
			if m.stillRunning(cur) {
				continue // the old static pod is terminating: its mirror shows it until it has
			}
			m.log.Info("mirror pod outdated; replacing it", "pod", key, "hash", hash, "mirrorHash", cur.Annotations[podsource.MirrorAnnotation])
			errs = append(errs, m.replace(ctx, cur, sp))
		case cur.DeletionTimestamp != nil:
			// Deleted gracefully by someone: nobody else finishes the
			// deletion of a pod bound to a node, so the node deletes it
			// now and puts a new one in its place, as the kubelet does.
			m.log.Info("mirror pod being deleted; replacing it", "pod", key)
			errs = append(errs, m.replace(ctx, cur, sp))
		}
	}
	all, err := m.lister.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, p := range all {
		if !podsource.IsMirror(p) || p.Spec.NodeName != m.node {
			continue
		}
		if _, ok := want[p.Namespace+"/"+p.Name]; ok || m.stillRunning(p) {
			continue
		}
		m.log.Info("static pod gone; deleting its mirror pod", "pod", p.Namespace+"/"+p.Name)
		errs = append(errs, m.delete(ctx, p))
	}
	return errors.Join(errs...)
}

// stillRunning reports whether the static pod mirror stands for still runs.
func (m *Manager) stillRunning(mirror *corev1.Pod) bool {
	return m.running != nil && m.running(mirror.Namespace, mirror.Name, mirror.Annotations[podsource.MirrorAnnotation])
}

// replace deletes cur and creates sp's mirror pod in its place.
func (m *Manager) replace(ctx context.Context, cur, sp *corev1.Pod) error {
	if err := m.delete(ctx, cur); err != nil {
		return err
	}
	return m.create(ctx, sp)
}

func (m *Manager) nodeUIDFor(ctx context.Context, refresh bool) (types.UID, error) {
	m.mu.Lock()
	uid := m.nodeUID
	m.mu.Unlock()
	if uid != "" && !refresh {
		return uid, nil
	}
	n, err := m.client.CoreV1().Nodes().Get(ctx, m.node, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("node %s (mirror pods need it as their owner): %w", m.node, err)
	}
	m.mu.Lock()
	m.nodeUID = n.UID
	m.mu.Unlock()
	return n.UID, nil
}

func (m *Manager) create(ctx context.Context, sp *corev1.Pod) error {
	for attempt := 0; attempt < 2; attempt++ {
		uid, err := m.nodeUIDFor(ctx, attempt > 0)
		if err != nil {
			return err
		}
		p := sp.DeepCopy()
		p.ResourceVersion = ""
		p.Status = corev1.PodStatus{}
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[podsource.MirrorAnnotation] = sp.Annotations[podsource.HashAnnotation]
		controller := true
		p.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: m.node, UID: uid, Controller: &controller,
		}}
		_, err = m.client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		switch {
		case err == nil:
			m.ops.WithLabelValues("create").Inc()
			m.log.Info("mirror pod created", "pod", p.Namespace+"/"+p.Name)
			return nil
		case apierrors.IsAlreadyExists(err):
			return nil // the informer has not shown it yet, or it is being replaced; next pass decides
		case apierrors.IsForbidden(err) && attempt == 0:
			continue // perhaps the Node was recreated: fetch its UID again
		default:
			return fmt.Errorf("create mirror pod %s/%s: %w", p.Namespace, p.Name, err)
		}
	}
	return nil
}

func (m *Manager) delete(ctx context.Context, p *corev1.Pod) error {
	grace := int64(0)
	err := m.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: &grace,
		Preconditions:      metav1.NewUIDPreconditions(string(p.UID)),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete mirror pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	if err == nil {
		m.ops.WithLabelValues("delete").Inc()
	}
	return nil
}
