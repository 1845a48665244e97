package server

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"

	"github.com/microlet/microlet/services/statusd/internal/cache"
	"github.com/microlet/microlet/services/statusd/internal/podstatus"
	"github.com/microlet/microlet/services/statusd/internal/syncer"
)

// api implements statusdv1.StatusServiceServer over the cache.
type api struct {
	statusdv1.UnimplementedStatusServiceServer
	log *slog.Logger
	// maxStatus is the largest encoded status SetPodStatus takes; 0 is
	// DefaultMaxStatusBytes.
	maxStatus int
	// syncer is set in connected mode once the syncer is built; its
	// verdict of which statuses the API server refused as too large turns
	// the same status sent again into InvalidArgument.
	syncer atomic.Pointer[syncer.Syncer]

	gate  sync.RWMutex // calls hold it shared; close takes it exclusively
	cache *cache.Cache // nil before open and after close
	stop  chan struct{}
}

var _ statusdv1.StatusServiceServer = (*api)(nil)

func (a *api) open(c *cache.Cache) {
	a.gate.Lock()
	a.cache, a.stop = c, make(chan struct{})
	a.gate.Unlock()
}

func (a *api) close() {
	a.gate.Lock()
	if a.stop != nil {
		close(a.stop)
	}
	a.cache = nil
	a.gate.Unlock()
}

// acquire returns the cache with the gate held shared; release with done.
func (a *api) acquire() (*cache.Cache, func(), error) {
	a.gate.RLock()
	if a.cache == nil {
		a.gate.RUnlock()
		return nil, nil, status.Error(codes.Unavailable, "statusd is not ready (store not loaded or shutting down)")
	}
	return a.cache, a.gate.RUnlock, nil
}

func decodePod(field string, b []byte) (*corev1.Pod, error) {
	if len(b) == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "%s: empty; want a core/v1 Pod in protobuf encoding", field)
	}
	p := &corev1.Pod{}
	if err := p.Unmarshal(b); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "%s: not a core/v1 Pod in protobuf encoding: %v", field, err)
	}
	return p, nil
}

// toStatus maps cache errors to gRPC codes.
func (a *api) toStatus(method string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, podstatus.ErrIllegalTransition), errors.Is(err, cache.ErrInvalid):
		a.log.Warn("refused", "method", method, "err", err)
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, cache.ErrNotFound):
		return status.Error(codes.NotFound, err.Error())
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

// DefaultMaxStatusBytes is the largest encoded pod status statusd takes by
// default: etcd's default request limit (--max-request-bytes, 1.5 MiB),
// above which the API server can never store the pod, whatever its spec.
const DefaultMaxStatusBytes = 3 << 19

func (a *api) statusLimit() int {
	if a.maxStatus > 0 {
		return a.maxStatus
	}
	return DefaultMaxStatusBytes
}

func (a *api) SetPodStatus(_ context.Context, req *statusdv1.SetPodStatusRequest) (*statusdv1.SetPodStatusResponse, error) {
	pod, err := decodePod("pod", req.GetPod())
	if err != nil {
		return nil, err
	}
	// Refused before it is cached: a cached status the API server cannot
	// store would be patched again on every reconcile, and the caller
	// (podsyncd) holds a refused status back until it changes.
	if n, limit := len(req.GetStatus()), a.statusLimit(); n > limit {
		return nil, status.Errorf(codes.InvalidArgument, "status of pod %s/%s (uid %s) is %d bytes encoded, over statusd's limit of %d (max_status_bytes): the API server could not store it",
			pod.Namespace, pod.Name, pod.UID, n, limit)
	}
	st := &corev1.PodStatus{}
	if err := st.Unmarshal(req.GetStatus()); err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "status: not a core/v1 PodStatus in protobuf encoding: %v", err)
	}
	c, done, err := a.acquire()
	if err != nil {
		return nil, err
	}
	defer done()
	v, err := c.SetPodStatus(pod, st)
	if err != nil {
		return nil, a.toStatus("SetPodStatus", err)
	}
	// The same status again (no new version) after the API server refused
	// it as too large: the caller learns that it can stop sending it. It
	// stays cached and served here.
	if x := a.syncer.Load(); x != nil && x.RefusedAsTooLarge(string(pod.UID), v) {
		return nil, status.Errorf(codes.InvalidArgument, "status of pod %s/%s (uid %s, version %d, %d bytes encoded): the API server refused it as too large; it is not sent there again until it changes",
			pod.Namespace, pod.Name, pod.UID, v, len(req.GetStatus()))
	}
	return &statusdv1.SetPodStatusResponse{Version: v}, nil
}

func (a *api) SetContainerReadiness(_ context.Context, req *statusdv1.SetContainerReadinessRequest) (*statusdv1.SetContainerReadinessResponse, error) {
	c, done, err := a.acquire()
	if err != nil {
		return nil, err
	}
	defer done()
	v, err := c.SetContainerReadiness(req.GetPodUid(), req.GetContainerId(), req.GetReady())
	if err != nil {
		return nil, a.toStatus("SetContainerReadiness", err)
	}
	return &statusdv1.SetContainerReadinessResponse{Version: v}, nil
}

func (a *api) SetContainerStartup(_ context.Context, req *statusdv1.SetContainerStartupRequest) (*statusdv1.SetContainerStartupResponse, error) {
	c, done, err := a.acquire()
	if err != nil {
		return nil, err
	}
	defer done()
	v, err := c.SetContainerStartup(req.GetPodUid(), req.GetContainerId(), req.GetStarted())
	if err != nil {
		return nil, a.toStatus("SetContainerStartup", err)
	}
	return &statusdv1.SetContainerStartupResponse{Version: v}, nil
}

func (a *api) TerminatePod(_ context.Context, req *statusdv1.TerminatePodRequest) (*statusdv1.TerminatePodResponse, error) {
	pod, err := decodePod("pod", req.GetPod())
	if err != nil {
		return nil, err
	}
	c, done, err := a.acquire()
	if err != nil {
		return nil, err
	}
	defer done()
	v, err := c.TerminatePod(pod)
	if err != nil {
		return nil, a.toStatus("TerminatePod", err)
	}
	return &statusdv1.TerminatePodResponse{Version: v}, nil
}

func (a *api) RemoveOrphanedStatuses(_ context.Context, req *statusdv1.RemoveOrphanedStatusesRequest) (*statusdv1.RemoveOrphanedStatusesResponse, error) {
	c, done, err := a.acquire()
	if err != nil {
		return nil, err
	}
	defer done()
	removed, err := c.RemoveOrphaned(req.GetKeepPodUids())
	if err != nil {
		return nil, a.toStatus("RemoveOrphanedStatuses", err)
	}
	return &statusdv1.RemoveOrphanedStatusesResponse{RemovedPodUids: removed}, nil
}

func (a *api) ReportPodResourcesReclaimed(_ context.Context, req *statusdv1.ReportPodResourcesReclaimedRequest) (*statusdv1.ReportPodResourcesReclaimedResponse, error) {
	c, done, err := a.acquire()
	if err != nil {
		return nil, err
	}
	defer done()
	if err := c.ReportReclaimed(req.GetPodUid()); err != nil {
		return nil, a.toStatus("ReportPodResourcesReclaimed", err)
	}
	return &statusdv1.ReportPodResourcesReclaimedResponse{}, nil
}

func toEntry(e *cache.Entry) (*statusdv1.PodStatusEntry, error) {
	b, err := e.Status.Marshal()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encode status of %s: %v", e.UID, err)
	}
	return &statusdv1.PodStatusEntry{PodUid: e.UID, Namespace: e.Namespace, Name: e.Name, Status: b, Version: e.Version, SyncedVersion: e.SyncedVersion}, nil
}

func (a *api) GetPodStatus(_ context.Context, req *statusdv1.GetPodStatusRequest) (*statusdv1.GetPodStatusResponse, error) {
	if req.GetPodUid() == "" {
		return nil, status.Error(codes.InvalidArgument, "pod_uid must be set")
	}
	c, done, err := a.acquire()
	if err != nil {
		return nil, err
	}
	defer done()
	e, ok := c.Get(req.GetPodUid())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no status cached for pod_uid %s", req.GetPodUid())
	}
	pe, err := toEntry(&e)
	if err != nil {
		return nil, err
	}
	return &statusdv1.GetPodStatusResponse{Entry: pe}, nil
}

func (a *api) ListPodStatuses(_ context.Context, _ *statusdv1.ListPodStatusesRequest) (*statusdv1.ListPodStatusesResponse, error) {
	c, done, err := a.acquire()
	if err != nil {
		return nil, err
	}
	defer done()
	resp := &statusdv1.ListPodStatusesResponse{}
	for _, e := range c.List() {
		pe, err := toEntry(&e)
		if err != nil {
			return nil, err
		}
		resp.Entries = append(resp.Entries, pe)
	}
	return resp, nil
}

func (a *api) WatchPodStatuses(_ *statusdv1.WatchPodStatusesRequest, stream statusdv1.StatusService_WatchPodStatusesServer) error {
	c, done, err := a.acquire()
	if err != nil {
		return err
	}
	shutdown := a.stop
	snapshot, events, overflowed, stop := c.Watch()
	done() // a watch must not hold the gate: shutdown would wait for it forever
	defer stop()
	for i := range snapshot {
		pe, err := toEntry(&snapshot[i])
		if err != nil {
			return err
		}
		if err := stream.Send(&statusdv1.WatchPodStatusesResponse{Entry: pe, Snapshot: true}); err != nil {
			return err
		}
	}
	for {
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-shutdown:
			return status.Error(codes.Unavailable, "statusd is shutting down")
		case ev, ok := <-events:
			if !ok {
				if overflowed() {
					return status.Error(codes.ResourceExhausted, cache.ErrWatchOverflow.Error())
				}
				return status.Error(codes.Unavailable, "watch closed")
			}
			pe, err := toEntry(&ev.Entry)
			if err != nil {
				return err
			}
			if err := stream.Send(&statusdv1.WatchPodStatusesResponse{Entry: pe, Removed: ev.Removed}); err != nil {
				return err
			}
		}
	}
}
