package supervisor

import (
	"context"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/microlet/microlet/cmd/microlet/internal/probe"
	supervisorv1 "github.com/microlet/microlet/proto/microlet/supervisor/v1"
)

// probeTimeout bounds one health probe of ListComponents; a component that
// cannot answer within it is reported DOWN rather than stalling `status`.
const probeTimeout = 2 * time.Second

// api serves SupervisorService from the supervisor's state.
type api struct {
	supervisorv1.UnimplementedSupervisorServiceServer
	s *Supervisor
}

var _ supervisorv1.SupervisorServiceServer = (*api)(nil)

// ListComponents snapshots every component and probes its health now, in
// parallel, so the answer is current rather than the last poll's.
func (a *api) ListComponents(ctx context.Context, _ *supervisorv1.ListComponentsRequest) (*supervisorv1.ListComponentsResponse, error) {
	return &supervisorv1.ListComponentsResponse{Components: a.s.Components(ctx)}, nil
}

// Components reports each component in start order with its health probed now.
func (s *Supervisor) Components(ctx context.Context) []*supervisorv1.Component {
	out := make([]*supervisorv1.Component, len(s.children))
	s.mu.Lock()
	for i, c := range s.children {
		pc := &supervisorv1.Component{
			Name:     c.name,
			Endpoint: c.endpoint,
			External: c.external,
			Restarts: int32(c.restarts),
			LastExit: c.lastExit,
		}
		if p := c.proc; p != nil {
			select {
			case <-p.done:
			default:
				pc.Pid = int32(p.pid)
				pc.StartedAt = timestamppb.New(p.started)
			}
		}
		out[i] = pc
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, pc := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, probeTimeout)
			defer cancel()
			pc.Health = probe.Health(pctx, pc.Endpoint).Health
		}()
	}
	wg.Wait()
	return out
}
