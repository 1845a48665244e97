package statusupdate

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	nodeutil "k8s.io/component-helpers/node/util"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/microlet/microlet/services/nodestatusd/internal/setters"
)

// Defaults of the kubelet.
const (
	// DefaultReportFrequency is --node-status-report-frequency.
	DefaultReportFrequency = 5 * time.Minute
	// Retries is the kubelet's nodeStatusUpdateRetry.
	Retries = 5
	// FastInterval and FastTimeout are the startup loop that reports Ready early.
	FastInterval = 100 * time.Millisecond
	FastTimeout  = 120 * time.Second
)

// Updater patches one Node's status.
type Updater struct {
	name      string
	client    kubernetes.Interface
	lister    corelisters.NodeLister
	setters   []setters.Setter
	clock     clock.WithTicker
	frequency time.Duration
	labels    map[string]string
	log       *slog.Logger
	onFailure func()
	onPatched func(*corev1.Node)
	jitter    bool

	// syncMu serialises syncs: the startup loop and the periodic one
	// must not compute from the same original and both patch.
	syncMu sync.Mutex

	mu         sync.Mutex
	lastReport time.Time
	delay      time.Duration
	patches    int
}

// Option configures an Updater.
type Option func(*Updater)

// WithClock injects the clock (tests step it past the report frequency).
func WithClock(c clock.WithTicker) Option { return func(u *Updater) { u.clock = c } }

// WithReportFrequency sets node_status_report_frequency.
func WithReportFrequency(d time.Duration) Option { return func(u *Updater) { u.frequency = d } }

// WithLabels sets labels the Node must carry; drift is repaired with the
// status patch (hostname, os, arch and cloud labels).
func WithLabels(l map[string]string) Option { return func(u *Updater) { u.labels = l } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(u *Updater) { u.log = l } }

// WithRepeatedFailure is called when a retry fails too; the agent closes
// idle connections so a dead TCP connection is not reused forever.
func WithRepeatedFailure(f func()) Option { return func(u *Updater) { u.onFailure = f } }

// WithOnPatched is called with the Node the API server returned.
func WithOnPatched(f func(*corev1.Node)) Option { return func(u *Updater) { u.onPatched = f } }

// WithoutJitter makes the report period exact (tests).
func WithoutJitter() Option { return func(u *Updater) { u.jitter = false } }

// New returns an Updater for node name.
func New(name string, client kubernetes.Interface, lister corelisters.NodeLister, s []setters.Setter, opts ...Option) *Updater {
	u := &Updater{name: name, client: client, lister: lister, setters: s, clock: clock.RealClock{},
		frequency: DefaultReportFrequency, log: slog.Default(), jitter: true}
	for _, o := range opts {
		o(u)
	}
	return u
}

// Patches counts successful status patches (metrics and tests).
func (u *Updater) Patches() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.patches
}

// Compute runs the setters on a copy of original and reports whether the
// status (heartbeat times aside) or a required label changed. Setters write
// only the status, so only the status is copied deeply (and the labels when
// one is repaired); the rest of the Node is shared with original, and
// neither may be changed afterwards.
func (u *Updater) Compute(ctx context.Context, original *corev1.Node) (*corev1.Node, bool) {
	node := new(corev1.Node)
	*node = *original
	original.Status.DeepCopyInto(&node.Status)
	labelsChanged := false
	for k, v := range u.labels {
		if node.Labels[k] != v {
			if !labelsChanged {
				node.Labels = maps.Clone(node.Labels)
				if node.Labels == nil {
					node.Labels = map[string]string{}
				}
			}
			node.Labels[k] = v
			labelsChanged = true
		}
	}
	for _, set := range u.setters {
		if err := set(ctx, node); err != nil {
			u.log.Warn("computing node status", "node", u.name, "err", err)
		}
	}
	return node, labelsChanged || StatusChanged(&original.Status, &node.Status)
}

// Update syncs the status with up to Retries tries. A NotFound error is
// returned wrapped so the caller can re-register.
func (u *Updater) Update(ctx context.Context) error {
	u.syncMu.Lock()
	defer u.syncMu.Unlock()
	return u.update(ctx)
}

func (u *Updater) update(ctx context.Context) error {
	var last error
	for try := range Retries {
		err := u.try(ctx, try)
		if err == nil {
			return nil
		}
		// The cache may not hold a Node just registered; only a live
		// NotFound means the Node is gone.
		if (apierrors.IsNotFound(err) && (try > 0 || u.lister == nil)) || ctx.Err() != nil {
			return err
		}
		last = err
		if try > 0 && u.onFailure != nil {
			u.onFailure()
		}
		u.log.Warn("updating node status failed, retrying", "node", u.name, "try", try, "err", err)
	}
	return fmt.Errorf("update node status exceeds retry count: %w", last)
}

func (u *Updater) try(ctx context.Context, try int) error {
	var original *corev1.Node
	var err error
	if try == 0 && u.lister != nil {
		original, err = u.lister.Get(u.name)
	} else {
		original, err = u.client.CoreV1().Nodes().Get(ctx, u.name, metav1.GetOptions{})
	}
	if err != nil {
		return fmt.Errorf("get node %s: %w", u.name, err)
	}
	node, changed := u.Compute(ctx, original)
	u.mu.Lock()
	// A negative age means the clock was stepped back past the last report
	// (the real clock's monotonic reading hides a step from Since; a clock
	// without one does not): report now rather than for as long as it
	// went back.
	age := u.clock.Since(u.lastReport)
	expired := age < 0 || age >= u.frequency+u.delay
	if !changed && !expired {
		u.mu.Unlock()
		return nil
	}
	// As the kubelet does: a change (or the first report) draws a new random
	// offset so nodes do not report in lockstep; a periodic report clears it.
	if u.jitter && (changed || u.lastReport.IsZero()) {
		u.delay = time.Duration(float64(u.frequency) * (rand.Float64() - 0.5)) //nolint:gosec // jitter, not security
	} else {
		u.delay = 0
	}
	u.mu.Unlock()
	return u.patch(ctx, original, node)
}

func (u *Updater) patch(ctx context.Context, original, node *corev1.Node) error {
	// PatchNodeStatus has no context; the heartbeat client's timeout bounds it.
	if err := ctx.Err(); err != nil {
		return err
	}
	updated, _, err := nodeutil.PatchNodeStatus(u.client.CoreV1(), types.NodeName(u.name), original, node)
	if err != nil {
		// PatchNodeStatus flattens the error with %v; keep NotFound visible
		// so the agent re-registers a deleted Node.
		if strings.Contains(err.Error(), "not found") {
			if _, gerr := u.client.CoreV1().Nodes().Get(ctx, u.name, metav1.GetOptions{}); apierrors.IsNotFound(gerr) {
				return gerr
			}
		}
		return err
	}
	u.mu.Lock()
	u.lastReport = u.clock.Now()
	u.patches++
	u.mu.Unlock()
	if u.onPatched != nil {
		u.onPatched(updated)
	}
	return nil
}

// FastOnce is one pass of the startup loop, run every FastInterval for at
// most FastTimeout so that a node whose runtime comes up a second after
// start is Ready a second later, not a whole period later. It reports
// whether the loop is done: the Node is Ready, or the Ready just computed
// was patched (when that patch failed, one full sync is tried).
func (u *Updater) FastOnce(ctx context.Context) bool {
	u.syncMu.Lock()
	defer u.syncMu.Unlock()
	original, err := u.lister.Get(u.name)
	if err != nil {
		return false
	}
	if _, c := nodeutil.GetNodeCondition(&original.Status, corev1.NodeReady); c != nil && c.Status == corev1.ConditionTrue {
		return true
	}
	node, changed := u.Compute(ctx, original)
	if !changed {
		return false
	}
	if _, c := nodeutil.GetNodeCondition(&node.Status, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
		return false
	}
	u.log.Info("node became ready; reporting at once", "node", u.name)
	if err := u.patch(ctx, original, node); err != nil {
		u.log.Warn("fast status update failed; the periodic sync retries live", "node", u.name, "err", err)
		_ = u.update(ctx)
	}
	return true
}

// StatusChanged compares two statuses ignoring condition heartbeat times, as
// the kubelet's nodeStatusHasChanged does, with the same semantic equality
// (quantities by value, times by instant, nil equal to empty). It runs every
// sync of every node, so it compares field by field instead of by
// reflection; TestStatusChangedKnowsEveryField fails when the API gains a
// field this does not compare.
func StatusChanged(a, b *corev1.NodeStatus) bool {
	if a == nil || b == nil {
		return a != b
	}
	return !conditionsEqual(a.Conditions, b.Conditions) ||
		!slices.Equal(a.Addresses, b.Addresses) ||
		a.DaemonEndpoints != b.DaemonEndpoints ||
		!resourcesEqual(a.Capacity, b.Capacity) ||
		!resourcesEqual(a.Allocatable, b.Allocatable) ||
		!slices.EqualFunc(a.Images, b.Images, imageEqual) ||
		!nodeInfoEqual(a.NodeInfo, b.NodeInfo) ||
		a.Phase != b.Phase ||
		!slices.Equal(a.VolumesInUse, b.VolumesInUse) ||
		!slices.Equal(a.VolumesAttached, b.VolumesAttached) ||
		!slices.Equal(a.DeclaredFeatures, b.DeclaredFeatures) ||
		!bothEmptyOrEqual(a.Config == nil && b.Config == nil, a.Config, b.Config) ||
		!bothEmptyOrEqual(a.Features == nil && b.Features == nil, a.Features, b.Features) ||
		!bothEmptyOrEqual(len(a.RuntimeHandlers) == 0 && len(b.RuntimeHandlers) == 0, a.RuntimeHandlers, b.RuntimeHandlers)
}

// bothEmptyOrEqual compares rarely set fields by reflection, skipping it
// when both are empty.
func bothEmptyOrEqual(bothEmpty bool, a, b any) bool {
	return bothEmpty || equality.Semantic.DeepEqual(a, b)
}

// conditionsEqual compares conditions by type, ignoring heartbeat times.
func conditionsEqual(a, b []corev1.NodeCondition) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		c := &a[i]
		j := slices.IndexFunc(b, func(d corev1.NodeCondition) bool { return d.Type == c.Type })
		if j < 0 {
			return false
		}
		d := &b[j]
		if !c.LastTransitionTime.Equal(&d.LastTransitionTime) {
			return false
		}
		// Every other field is a string: compared with ==, and a field of
		// another kind added to the API stops this compiling.
		x, y := *c, *d
		x.LastHeartbeatTime, y.LastHeartbeatTime = metav1.Time{}, metav1.Time{}
		x.LastTransitionTime, y.LastTransitionTime = metav1.Time{}, metav1.Time{}
		if x != y {
			return false
		}
	}
	return true
}

// resourcesEqual compares quantities by value ("1000m" equals "1").
func resourcesEqual(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, q := range a {
		r, ok := b[name]
		if !ok || q.Cmp(r) != 0 {
			return false
		}
	}
	return true
}

// nodeInfoEqual compares the system info: strings and the swap capacity. A
// field of another kind added to the API stops this compiling.
func nodeInfoEqual(a, b corev1.NodeSystemInfo) bool {
	if (a.Swap == nil) != (b.Swap == nil) || a.Swap != nil && !ptr.Equal(a.Swap.Capacity, b.Swap.Capacity) {
		return false
	}
	a.Swap, b.Swap = nil, nil
	return a == b
}

func imageEqual(a, b corev1.ContainerImage) bool {
	return a.SizeBytes == b.SizeBytes && slices.Equal(a.Names, b.Names)
}
