package statusreport

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
)

// errStatusHeld is sendStatus's answer for a status statusd refused as
// invalid: said and counted by refusals, not by failures.
var errStatusHeld = errors.New("statusd refused this status; held back until it changes")

// refusals holds back the statuses statusd refused as invalid
// (InvalidArgument: larger than it takes, a transition it does not allow).
// The same status would be refused again on every sync, and one too large
// for statusd is megabytes on the socket each time, so it is sent once and
// again only when it changes. The first refusal of a pod's status is a
// warning naming the pod and the size; later ones, until statusd takes a
// status of the pod again, are debug lines. Every refused status counts
// once in microlet_podsyncd_status_refused_total.
type refusals struct {
	log   *slog.Logger
	count prometheus.Counter

	mu   sync.Mutex
	held map[types.UID][sha256.Size]byte // the pod's last refused status, by digest
}

func newRefusals(log *slog.Logger, reg prometheus.Registerer) *refusals {
	r := &refusals{
		log: log,
		count: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "microlet", Subsystem: "podsyncd", Name: "status_refused_total",
			Help: "Pod statuses statusd refused as invalid (too large, a transition it does not allow); each is sent once, and again only once it changes.",
		}),
		held: map[types.UID][sha256.Size]byte{},
	}
	if reg != nil {
		reg.MustRegister(r.count)
	}
	return r
}

// send hands statusd the pod's status (pb and sb, their encodings) unless
// it is the one statusd last refused for the pod; a refusal holds it back.
func (r *refusals) send(ctx context.Context, c statusdv1.StatusServiceClient, pod *corev1.Pod, pb, sb []byte) error {
	sum := sha256.Sum256(sb)
	r.mu.Lock()
	last, refusedBefore := r.held[pod.UID]
	r.mu.Unlock()
	if refusedBefore && last == sum {
		return errStatusHeld
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	_, err := c.SetPodStatus(cctx, &statusdv1.SetPodStatusRequest{Pod: pb, Status: sb})
	switch {
	case status.Code(err) == codes.InvalidArgument:
		r.mu.Lock()
		r.held[pod.UID] = sum
		r.mu.Unlock()
		r.count.Inc()
		say := r.log.Warn
		if refusedBefore {
			say = r.log.Debug
		}
		say("statusd refused the pod's status; it is not sent again until it changes",
			"pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID, "statusBytes", len(sb), "err", status.Convert(err).Message())
		return errStatusHeld
	case err != nil:
		return fmt.Errorf("statusd did not take it; it is resent until it does: %w", err)
	}
	if refusedBefore {
		r.forget(pod.UID)
		r.log.Info("statusd takes the pod's status again", "pod", pod.Namespace+"/"+pod.Name, "uid", pod.UID)
	}
	return nil
}

// forget drops what is held for a pod that is gone.
func (r *refusals) forget(uid types.UID) {
	r.mu.Lock()
	delete(r.held, uid)
	r.mu.Unlock()
}
