package client

import (
	"context"
	"log/slog"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
)

// DefaultBackoff is the reconnect backoff used when Watcher.Backoff is zero:
// 100 ms doubling to 5 s, with 20% jitter.
var DefaultBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: 5 * time.Second}

// Update is one decoded podconfig update: an operation of one source on its
// pods.
type Update struct {
	// Op is what happened: ADD, UPDATE, DELETE, REMOVE, RECONCILE, or SET
	// (the source's whole set, as in a snapshot).
	Op podconfigv1.Operation
	// Source is the pod source, such as "file", "http" or "api".
	Source string
	// Pods are the update's pods, without those that did not decode.
	Pods []*corev1.Pod
}

// Event is one message of the Watch stream.
type Event struct {
	// Sequence is the message's sequence number.
	Sequence uint64
	// Resync marks a snapshot: the updates (one SET per source) replace
	// everything known before.
	Resync bool
	// Updates are the message's updates, in order.
	Updates []Update
}

// Watcher follows podconfig's Watch stream until its context ends.
type Watcher struct {
	// Client is podconfig's client.
	Client podconfigv1.PodConfigServiceClient
	// Handle receives every event, in order, on Run's goroutine.
	Handle func(Event)
	// Log receives reconnects and undecodable pods (slog.Default if nil).
	Log *slog.Logger
	// Backoff is the reconnect backoff (DefaultBackoff if zero). It starts
	// over after a stream that delivered an event.
	Backoff wait.Backoff

	// retried, set by tests, sees every reconnect delay.
	retried func(time.Duration)
	seq     uint64
}

// Sequence returns the sequence of the last event handled (0 before the
// first). It must be called from Handle or after Run returned.
func (w *Watcher) Sequence() uint64 { return w.seq }

// Run follows the stream until ctx ends, reconnecting with backoff and
// resuming after the last event handled.
func (w *Watcher) Run(ctx context.Context) {
	log := w.Log
	if log == nil {
		log = slog.Default()
	}
	b := w.Backoff
	if b == (wait.Backoff{}) {
		b = DefaultBackoff
	}
	delay := b.DelayFunc()
	for ctx.Err() == nil {
		healthy, err := w.watchOnce(ctx, log)
		if ctx.Err() != nil {
			return
		}
		if healthy {
			delay = b.DelayFunc()
		}
		d := delay()
		if w.retried != nil {
			w.retried(d)
		}
		log.Info("podconfig watch ended; resuming", "err", err, "resumeAfter", w.seq, "after", d)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// watchOnce follows one stream until it breaks; healthy reports whether it
// delivered an event.
func (w *Watcher) watchOnce(ctx context.Context, log *slog.Logger) (healthy bool, err error) {
	stream, err := w.Client.Watch(ctx, &podconfigv1.WatchRequest{ResumeAfter: w.seq})
	if err != nil {
		return false, err
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return healthy, err
		}
		w.Handle(Decode(resp, log))
		w.seq = resp.GetSequence()
		healthy = true
	}
}

// Decode turns one Watch message into an Event. A pod that does not decode
// is logged on log and left out.
func Decode(resp *podconfigv1.WatchResponse, log *slog.Logger) Event {
	ev := Event{Sequence: resp.GetSequence(), Resync: resp.GetResync(), Updates: make([]Update, 0, len(resp.GetUpdates()))}
	for _, u := range resp.GetUpdates() {
		out := Update{Op: u.GetOp(), Source: u.GetSource(), Pods: make([]*corev1.Pod, 0, len(u.GetPods()))}
		for i, raw := range u.GetPods() {
			p := &corev1.Pod{}
			if err := p.Unmarshal(raw); err != nil {
				log.Warn("podconfig sent a pod that does not decode; skipping it",
					"sequence", resp.GetSequence(), "op", u.GetOp().String(), "source", u.GetSource(), "index", i, "err", err)
				continue
			}
			out.Pods = append(out.Pods, p)
		}
		ev.Updates = append(ev.Updates, out)
	}
	return ev
}
