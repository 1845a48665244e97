package pleg

import (
	"context"
	"io"
	"log/slog"
	"math"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	kubelettypes "k8s.io/kubelet/pkg/types"
)

// Relister reports changed pods.
type Relister struct {
	rt       runtimeapi.RuntimeServiceClient
	period   time.Duration
	onChange func(types.UID)
	log      *slog.Logger
	last     map[types.UID]string
}

// New returns a relister calling onChange for every pod whose runtime state changed.
func New(rt runtimeapi.RuntimeServiceClient, period time.Duration, log *slog.Logger, onChange func(types.UID)) *Relister {
	return &Relister{rt: rt, period: period, onChange: onChange, log: log, last: map[types.UID]string{}}
}

// Run relists until ctx ends, and follows the runtime's event stream alongside.
func (r *Relister) Run(ctx context.Context) {
	go r.events(ctx)
	t := time.NewTicker(r.period)
	defer t.Stop()
	for {
		if err := r.Relist(ctx); err != nil && ctx.Err() == nil {
			r.log.Debug("relist failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Relist compares the runtime with the previous relist once.
func (r *Relister) Relist(ctx context.Context) error {
	sbs, err := r.rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return err
	}
	cs, err := r.rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		return err
	}
	parts := map[types.UID][]string{}
	for _, sb := range sbs.Items {
		uid := types.UID(sb.Labels[kubelettypes.KubernetesPodUIDLabel])
		if uid == "" {
			continue
		}
		parts[uid] = append(parts[uid], "s:"+sb.Id+":"+sb.State.String())
	}
	for _, c := range cs.Containers {
		uid := types.UID(c.Labels[kubelettypes.KubernetesPodUIDLabel])
		if uid == "" {
			continue
		}
		parts[uid] = append(parts[uid], "c:"+c.Id+":"+c.State.String())
	}
	now := map[types.UID]string{}
	for uid, p := range parts {
		sort.Strings(p)
		now[uid] = strings.Join(p, ",")
	}
	for uid, fp := range now {
		if r.last[uid] != fp {
			r.onChange(uid)
		}
	}
	for uid := range r.last {
		if _, ok := now[uid]; !ok {
			r.onChange(uid)
		}
	}
	r.last = now
	return nil
}

// eventsBackoff spaces the attempts to follow GetContainerEvents: 1 s
// doubling to 30 s, from the start again after a stream delivered.
var eventsBackoff = wait.Backoff{Duration: time.Second, Factor: 2, Steps: math.MaxInt32, Cap: 30 * time.Second}

// events follows GetContainerEvents; a runtime without it answers
// Unimplemented and relist alone carries on.
func (r *Relister) events(ctx context.Context) {
	delay := eventsBackoff.DelayFunc()
	for ctx.Err() == nil {
		stream, err := r.rt.GetContainerEvents(ctx, &runtimeapi.GetEventsRequest{})
		if err == nil {
			for {
				ev, err := stream.Recv()
				if err != nil {
					if err != io.EOF && ctx.Err() == nil {
						r.log.Debug("container event stream ended", "err", err)
					}
					break
				}
				delay = eventsBackoff.DelayFunc()
				if sb := ev.GetPodSandboxStatus(); sb != nil && sb.Metadata != nil {
					r.onChange(types.UID(sb.Metadata.Uid))
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay()):
		}
	}
}
