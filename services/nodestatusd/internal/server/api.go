package server

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	nodestatusv1 "github.com/microlet/microlet/proto/microlet/nodestatus/v1"
	"github.com/microlet/microlet/services/nodestatusd/internal/agent"
	"github.com/microlet/microlet/services/nodestatusd/internal/setters"
)

// api implements NodeStatusService over the agents.
type api struct {
	nodestatusv1.UnimplementedNodeStatusServiceServer
	log       *slog.Logger
	extra     *setters.Conditions
	readyErrs *setters.ReadyErrors

	mu     sync.RWMutex
	agents []*agent.Agent
	byName map[string]*agent.Agent
	ready  chan struct{}
}

var _ nodestatusv1.NodeStatusServiceServer = (*api)(nil)

func newAPI(log *slog.Logger) *api {
	return &api{log: log, ready: make(chan struct{})}
}

func (a *api) setAgents(agents []*agent.Agent) {
	a.mu.Lock()
	a.agents = agents
	a.byName = make(map[string]*agent.Agent, len(agents))
	for _, ag := range agents {
		a.byName[ag.Name()] = ag
	}
	a.mu.Unlock()
	close(a.ready)
}

func (a *api) pokeAll() {
	a.mu.RLock()
	defer a.mu.RUnlock()
	for _, ag := range a.agents {
		ag.Poke()
	}
}

// agent picks the named agent; "" is the first (nodestatusd's only one).
// A name no Node can have is the caller's mistake (InvalidArgument), a
// valid one this process does not keep is NotFound.
func (a *api) agent(ctx context.Context, name string) (*agent.Agent, error) {
	if name != "" {
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			return nil, status.Errorf(codes.InvalidArgument, "node_name %q: not a valid node name: %s", name, strings.Join(errs, "; "))
		}
	}
	select {
	case <-a.ready:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if name == "" {
		return a.agents[0], nil
	}
	ag, ok := a.byName[name]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "node_name %q: no such node here", name)
	}
	return ag, nil
}

func encode(n *corev1.Node) ([]byte, error) {
	b, err := n.Marshal()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "encode node: %v", err)
	}
	return b, nil
}

// GetNode returns the agent's latest Node.
func (a *api) GetNode(ctx context.Context, req *nodestatusv1.GetNodeRequest) (*nodestatusv1.GetNodeResponse, error) {
	ag, err := a.agent(ctx, req.GetNodeName())
	if err != nil {
		return nil, err
	}
	n := ag.Published().Get()
	if n == nil {
		return nil, status.Errorf(codes.Unavailable, "node %s: status not computed yet", ag.Name())
	}
	b, err := encode(n)
	if err != nil {
		return nil, err
	}
	return &nodestatusv1.GetNodeResponse{Node: b}, nil
}

// WatchNode sends the Node now and after every change.
func (a *api) WatchNode(_ *nodestatusv1.WatchNodeRequest, stream nodestatusv1.NodeStatusService_WatchNodeServer) error {
	ctx := stream.Context()
	ag, err := a.agent(ctx, "")
	if err != nil {
		return err
	}
	pub := ag.Published()
	var sent *corev1.Node
	for {
		n, changed := pub.Next()
		if n != nil && n != sent {
			b, err := encode(n)
			if err != nil {
				return err
			}
			if err := stream.Send(&nodestatusv1.WatchNodeResponse{Node: b}); err != nil {
				return err
			}
			sent = n
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
	}
}

// ReportNodeConditions merges a reporter's conditions.
func (a *api) ReportNodeConditions(_ context.Context, req *nodestatusv1.ReportNodeConditionsRequest) (*nodestatusv1.ReportNodeConditionsResponse, error) {
	conds := make([]corev1.NodeCondition, 0, len(req.GetConditions()))
	for i, b := range req.GetConditions() {
		var c corev1.NodeCondition
		if err := c.Unmarshal(b); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "conditions[%d]: not a core/v1 NodeCondition: %v", i, err)
		}
		conds = append(conds, c)
	}
	if err := a.extra.Report(req.GetReporter(), conds); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	a.log.Info("node conditions reported", "reporter", req.GetReporter(), "count", len(conds))
	return &nodestatusv1.ReportNodeConditionsResponse{}, nil
}

// ReportReadyErrors records a reporter's reasons for NotReady.
func (a *api) ReportReadyErrors(_ context.Context, req *nodestatusv1.ReportReadyErrorsRequest) (*nodestatusv1.ReportReadyErrorsResponse, error) {
	changed, err := a.readyErrs.Report(req.GetReporter(), req.GetErrors())
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if changed {
		a.log.Info("ready errors reported", "reporter", req.GetReporter(), "errors", req.GetErrors())
	}
	return &nodestatusv1.ReportReadyErrorsResponse{}, nil
}
