package runtimehandlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultPeriod is how often Run reads the runtime's Status: the kubelet's
// runtime check interval.
const DefaultPeriod = 5 * time.Second

// StatusReader is the part of the CRI runtime service Handlers reads.
type StatusReader interface {
	Status(ctx context.Context, verbose bool) (*runtimeapi.StatusResponse, error)
}

// Handlers is the runtime's handler list, safe for concurrent use.
type Handlers struct {
	rt  StatusReader
	log *slog.Logger

	mu       sync.RWMutex
	handlers []*runtimeapi.RuntimeHandler
}

// New returns an empty list (no handler supports anything) that Refresh
// fills from rt.
func New(rt StatusReader, log *slog.Logger) *Handlers {
	if log == nil {
		log = slog.Default()
	}
	return &Handlers{rt: rt, log: log}
}

// errNotReady is a Status without RuntimeReady true.
var errNotReady = errors.New("container runtime not ready")

// Refresh reads the runtime's Status and keeps its handlers when the
// runtime is ready; otherwise the list stays as it was.
func (h *Handlers) Refresh(ctx context.Context) error {
	resp, err := h.rt.Status(ctx, false)
	if err != nil {
		return fmt.Errorf("runtime status: %w", err)
	}
	ready := slices.ContainsFunc(resp.GetStatus().GetConditions(), func(c *runtimeapi.RuntimeCondition) bool {
		return c.GetType() == runtimeapi.RuntimeReady && c.GetStatus()
	})
	if !ready {
		return errNotReady
	}
	got := resp.GetRuntimeHandlers()
	h.mu.Lock()
	changed := describe(got) != describe(h.handlers)
	h.handlers = got
	h.mu.Unlock()
	if !changed {
		return nil
	}
	h.log.Info("runtime handlers", "handlers", describe(got))
	if len(got) > 0 && !slices.ContainsFunc(got, func(hd *runtimeapi.RuntimeHandler) bool { return hd.GetName() == defaultHandler }) {
		h.log.Error("unknown runtime handler: the runtime does not list the default handler pods run on", "runtimeHandlerName", defaultHandler)
	}
	return nil
}

// Run refreshes the list every period until ctx ends; a failure is logged
// at debug level (the Node's Ready condition, nodestatusd's, reports a
// runtime that is down).
func (h *Handlers) Run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := h.Refresh(ctx); err != nil && ctx.Err() == nil {
				h.log.Debug("runtime handlers not refreshed", "err", err)
			}
		}
	}
}

// defaultHandler is the handler of pods without a runtimeClassName: the
// runtime's default.
const defaultHandler = ""

// SupportsRecursiveReadOnlyMounts says whether handler (a pod's, resolved
// from its RuntimeClass; "" is the default) makes recursive read-only
// mounts. A runtime that lists no handlers (older than the feature), or not
// that one, makes none.
func (h *Handlers) SupportsRecursiveReadOnlyMounts(handler string) bool {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, hd := range h.handlers {
		if hd.GetName() == handler {
			return hd.GetFeatures().GetRecursiveReadOnlyMounts()
		}
	}
	return false
}

// describe is a handler list as the log shows it.
func describe(hs []*runtimeapi.RuntimeHandler) string {
	parts := make([]string, 0, len(hs))
	for _, h := range hs {
		parts = append(parts, fmt.Sprintf("%q(recursiveReadOnlyMounts=%v,userNamespaces=%v)",
			h.GetName(), h.GetFeatures().GetRecursiveReadOnlyMounts(), h.GetFeatures().GetUserNamespaces()))
	}
	return strings.Join(parts, ",")
}
