package service

import (
	"context"
	"log/slog"
	"sync/atomic"

	"k8s.io/klog/v2"
)

// klogBridge routes klog (client-go's informers, event recorders and the
// other Kubernetes libraries) to the service's slog handler. klog's logger
// may only be set before other goroutines log, so it is set when this
// package initialises, to a handler that forwards to whatever handler
// setupLogging last stored (slog's default until then); setupLogging (run
// again by tests that start several services in one process) only swaps
// that target, which is safe while libraries are logging.
var klogBridge struct {
	target atomic.Pointer[slog.Handler]
}

func init() { klog.SetSlogLogger(slog.New(forwardHandler{})) }

// routeKlog makes h the handler klog's records go to.
func routeKlog(h slog.Handler) { klogBridge.target.Store(&h) }

// forwardHandler is the slog.Handler klog holds: each record goes to the
// current target with the attributes and groups klog added on the way
// (replayed in order, as klog adds them rarely and logs little).
type forwardHandler struct {
	with []func(slog.Handler) slog.Handler
}

func (f forwardHandler) target() slog.Handler {
	p := klogBridge.target.Load()
	if p == nil {
		return slog.Default().Handler()
	}
	h := *p
	for _, w := range f.with {
		h = w(h)
	}
	return h
}

func (f forwardHandler) add(w func(slog.Handler) slog.Handler) forwardHandler {
	return forwardHandler{with: append(f.with[:len(f.with):len(f.with)], w)}
}

// Enabled implements slog.Handler.
func (f forwardHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return f.target().Enabled(ctx, l)
}

// Handle implements slog.Handler.
func (f forwardHandler) Handle(ctx context.Context, r slog.Record) error {
	return f.target().Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (f forwardHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return f.add(func(h slog.Handler) slog.Handler { return h.WithAttrs(attrs) })
}

// WithGroup implements slog.Handler.
func (f forwardHandler) WithGroup(name string) slog.Handler {
	return f.add(func(h slog.Handler) slog.Handler { return h.WithGroup(name) })
}
