package nodelease

import (
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/component-helpers/apimachinery/lease"
	"k8s.io/utils/clock"
)

// Defaults of the kubelet.
const (
	// DefaultDurationSeconds is --node-lease-duration-seconds.
	DefaultDurationSeconds = 40
	// RenewFraction is the kubelet's renew interval as a part of the duration.
	RenewFraction = 0.25
)

// RenewInterval is the kubelet's renew interval for a lease duration.
func RenewInterval(durationSeconds int32) time.Duration {
	return time.Duration(float64(time.Duration(durationSeconds)*time.Second) * RenewFraction)
}

// New returns the lease controller for node. The owner reference is taken
// from the informer's copy of the Node, so renewing costs no extra GET;
// while the Node is not known yet the Lease is written without one and the
// reference is added on a later renewal.
func New(clk clock.Clock, client kubernetes.Interface, node string, durationSeconds int32, renew time.Duration,
	nodes corelisters.NodeLister, onRepeatedFailure func()) lease.Controller {
	return lease.NewController(clk, client, node, durationSeconds, onRepeatedFailure, renew,
		node, corev1.NamespaceNodeLease, ownerFunc(nodes, node))
}

func ownerFunc(nodes corelisters.NodeLister, name string) lease.ProcessLeaseFunc {
	return func(l *coordinationv1.Lease) error {
		if nodes == nil {
			return nil
		}
		n, err := nodes.Get(name)
		if err != nil {
			return nil //nolint:nilerr // no owner yet; the next renewal adds it
		}
		for _, ref := range l.OwnerReferences {
			if ref.UID == n.UID {
				return nil
			}
		}
		l.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: corev1.SchemeGroupVersion.String(),
			Kind:       "Node",
			Name:       n.Name,
			UID:        n.UID,
		}}
		return nil
	}
}
