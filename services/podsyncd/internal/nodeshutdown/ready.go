package nodeshutdown

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	nodestatusv1 "github.com/microlet/microlet/proto/microlet/nodestatus/v1"
)

// Reporter is the name podsyncd's shutdown manager reports its readiness
// errors under.
const Reporter = "podsyncd/nodeshutdown"

// ReadyReporter hands the manager's readiness errors to nodestatusd, which
// owns the Ready condition: after every change (retried until nodestatusd
// takes it) and again every resend period while there are errors, so a
// restarted nodestatusd learns them.
type ReadyReporter struct {
	client nodestatusv1.NodeStatusServiceClient
	log    *slog.Logger
	resend time.Duration

	mu   sync.Mutex
	errs []string
	kick chan struct{}
}

// NewReadyReporter reports to client; resend 0 means 10 s.
func NewReadyReporter(client nodestatusv1.NodeStatusServiceClient, log *slog.Logger, resend time.Duration) *ReadyReporter {
	if resend <= 0 {
		resend = 10 * time.Second
	}
	return &ReadyReporter{client: client, log: log, resend: resend, kick: make(chan struct{}, 1)}
}

// Set replaces the errors to report (WithReadyErrors takes it).
func (r *ReadyReporter) Set(errs []string) {
	r.mu.Lock()
	r.errs = slices.Clone(errs)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Run sends reports until ctx ends.
func (r *ReadyReporter) Run(ctx context.Context) {
	t := time.NewTicker(r.resend)
	defer t.Stop()
	pending := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
			pending = true
		case <-t.C:
		}
		r.mu.Lock()
		errs := r.errs
		r.mu.Unlock()
		if !pending && len(errs) == 0 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := r.client.ReportReadyErrors(cctx, &nodestatusv1.ReportReadyErrorsRequest{Reporter: Reporter, Errors: errs})
		cancel()
		if err != nil {
			r.log.Warn("nodestatusd did not take the node's readiness errors; will resend", "errors", errs, "err", err)
			continue // pending stays: the next tick resends
		}
		pending = false
	}
}
