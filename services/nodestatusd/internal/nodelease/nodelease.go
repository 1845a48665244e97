package nodelease

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
)

// Defaults of the kubelet.
const (
	// DefaultDurationSeconds is --node-lease-duration-seconds.
	DefaultDurationSeconds = 40
	// RenewFraction is the kubelet's renew interval as a part of the duration.
	RenewFraction = 0.25
	// UpdateRetries is how many times one renewal tries the update.
	UpdateRetries = 5
	// MaxBackoff bounds the wait between tries to make sure the Lease exists.
	MaxBackoff = 7 * time.Second
)

// ensureBackoff spaces the tries to make sure the Lease exists: 200 ms
// doubling to MaxBackoff, as upstream's lease controller.
var ensureBackoff = wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: math.MaxInt32, Cap: MaxBackoff}

// RenewInterval is the kubelet's renew interval for a lease duration.
func RenewInterval(durationSeconds int32) time.Duration {
	return time.Duration(float64(time.Duration(durationSeconds)*time.Second) * RenewFraction)
}

// Renewer keeps one node's Lease. It is not safe for concurrent use: one
// caller renews at a time.
type Renewer struct {
	clock             clock.PassiveClock
	leases            coordclient.LeaseInterface
	node              string
	duration          int32
	nodes             corelisters.NodeLister
	onRepeatedFailure func()
	log               *slog.Logger

	// latest is the Lease as the API server last returned it, without
	// managed fields (an update that carries none leaves them alone).
	latest  *coordinationv1.Lease
	backoff wait.Backoff
	// behind is set while the clock reads no later than the Lease's renew
	// time (renewTime logs each change once).
	behind bool
}

// New returns the Renewer of node's Lease in kube-node-lease. The owner
// reference is taken from nodes (the informer's copy of the Node), so
// renewing costs no extra GET; while the Node is not known yet the Lease is
// written without one and the reference is added on a later renewal.
// onRepeatedFailure is called when an update fails again (the agent closes
// idle connections); it may be nil.
func New(clk clock.PassiveClock, leases coordclient.LeaseInterface, node string, durationSeconds int32,
	nodes corelisters.NodeLister, onRepeatedFailure func(), log *slog.Logger) *Renewer {
	if log == nil {
		log = slog.Default()
	}
	return &Renewer{clock: clk, leases: leases, node: node, duration: durationSeconds, nodes: nodes,
		onRepeatedFailure: onRepeatedFailure, log: log, backoff: ensureBackoff}
}

// Renew is one pass of the kubelet's lease controller: update the latest
// Lease it knows (up to UpdateRetries tries; a conflict re-reads it), else
// make sure the Lease exists (creating it when someone deleted it) and
// update that. It returns 0 when the Lease was ensured, else how long to
// wait before trying again: a backoff doubling from 200 ms to MaxBackoff
// while the Lease can be neither read nor created.
func (r *Renewer) Renew(ctx context.Context) time.Duration {
	if r.latest != nil {
		err := r.update(ctx)
		if err == nil {
			return 0
		}
		r.log.Info("failed to update lease using latest lease, fallback to ensure lease", "node", r.node, "err", err)
	}
	lease, created, err := r.ensure(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		d := r.backoff.Step()
		r.log.Error("failed to ensure lease exists, will retry", "node", r.node, "err", err, "interval", d)
		return d
	}
	r.backoff = ensureBackoff
	r.latest = lease
	if !created {
		if err := r.update(ctx); err != nil {
			r.log.Error("will retry updating lease", "node", r.node, "err", err)
		}
	}
	return 0
}

// ensure reads the Lease, creating it when missing.
func (r *Renewer) ensure(ctx context.Context) (*coordinationv1.Lease, bool, error) {
	lease, err := r.leases.Get(ctx, r.node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		lease, err = r.leases.Create(ctx, r.next(nil), metav1.CreateOptions{})
		if err != nil {
			return nil, false, fmt.Errorf("create lease %s/%s: %w", corev1.NamespaceNodeLease, r.node, err)
		}
		return trim(lease), true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("get lease %s/%s: %w", corev1.NamespaceNodeLease, r.node, err)
	}
	return trim(lease), false, nil
}

// update writes a renewed copy of latest, re-reading it after a conflict.
func (r *Renewer) update(ctx context.Context) error {
	base := r.latest
	for i := range UpdateRetries {
		if base != nil {
			lease, err := r.leases.Update(ctx, r.next(base), metav1.UpdateOptions{})
			if err == nil {
				r.latest = trim(lease)
				return nil
			}
			if ctx.Err() != nil {
				return err
			}
			r.log.Warn("failed to update lease", "node", r.node, "try", i, "err", err)
			if apierrors.IsConflict(err) {
				base, _, _ = r.ensure(ctx)
				continue
			}
		}
		if i > 0 && r.onRepeatedFailure != nil {
			r.onRepeatedFailure()
		}
	}
	return fmt.Errorf("failed %d attempts to update lease %s/%s", UpdateRetries, corev1.NamespaceNodeLease, r.node)
}

// next is base (or a new Lease held by the node) renewed now, owned by the
// Node when the informer knows it.
func (r *Renewer) next(base *coordinationv1.Lease) *coordinationv1.Lease {
	var l *coordinationv1.Lease
	if base == nil {
		l = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: r.node, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(r.node)},
		}
	} else {
		l = base.DeepCopy()
	}
	l.Spec.LeaseDurationSeconds = ptr.To(r.duration)
	l.Spec.RenewTime = &metav1.MicroTime{Time: r.renewTime(l.Spec.RenewTime)}
	r.setOwner(l)
	return l
}

// renewTime is now, unless the clock reads no later than prev, the renew
// time already written (the clock was stepped back, or this node's clock
// is behind the one of a previous run): then it is prev plus a microsecond,
// the smallest step a MicroTime keeps. The node lifecycle controller
// counts a renewal only when the renew time moves forward, so a renewal
// dated by a clock stepped back an hour would be ignored for that hour and
// the node marked unreachable, its pods evicted. The kubelet writes the
// clock's time regardless; this keeps the heartbeat visible instead. The
// controller times the Lease by its own clock, from when it saw the
// change, so a renew time ahead of the node's clock does not keep a dead
// node looking alive.
func (r *Renewer) renewTime(prev *metav1.MicroTime) time.Time {
	now := r.clock.Now()
	if prev == nil || now.Truncate(time.Microsecond).After(prev.Truncate(time.Microsecond)) {
		if r.behind {
			r.behind = false
			r.log.Info("the clock passed the Lease's last renew time again; renewing with the clock's time", "node", r.node)
		}
		return now
	}
	if !r.behind {
		r.behind = true
		r.log.Warn("the clock reads no later than the Lease's last renew time (was it stepped back?); renewing a microsecond after it so the node controller sees the heartbeat",
			"node", r.node, "now", now, "last_renew_time", prev.Time)
	}
	return prev.Truncate(time.Microsecond).Add(time.Microsecond)
}

func (r *Renewer) setOwner(l *coordinationv1.Lease) {
	if r.nodes == nil {
		return
	}
	n, err := r.nodes.Get(r.node)
	if err != nil {
		return // not cached yet; a later renewal adds the reference
	}
	for _, ref := range l.OwnerReferences {
		if ref.UID == n.UID {
			return
		}
	}
	l.OwnerReferences = []metav1.OwnerReference{{
		APIVersion: corev1.SchemeGroupVersion.String(),
		Kind:       "Node",
		Name:       n.Name,
		UID:        n.UID,
	}}
}

// trim drops the managed fields: they are a large part of a small object,
// every simulated node keeps one, and an update without them keeps the
// server's.
func trim(l *coordinationv1.Lease) *coordinationv1.Lease {
	if l != nil {
		l.ManagedFields = nil
	}
	return l
}
