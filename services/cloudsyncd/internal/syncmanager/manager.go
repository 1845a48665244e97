package syncmanager

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
)

// Defaults, the kubelet's.
const (
	DefaultSyncFrequency   = 10 * time.Second
	DefaultProviderTimeout = 10 * time.Second
	// maxWait bounds NodeAddresses for callers that set no deadline, so a
	// forgotten deadline cannot pin a handler forever.
	maxWait = time.Minute
)

// Error is the answer when there are no good addresses to give: the provider
// failed before its first success, or has not answered yet.
type Error struct {
	// Provider is the provider's name.
	Provider string
	// Reason is the provider's error, or the caller's context error when the
	// provider had not answered by the caller's deadline.
	Reason error
	// Pending is true when the provider had not answered at all.
	Pending bool
}

func (e *Error) Error() string {
	if e.Pending {
		return fmt.Sprintf("cloud provider %s has not answered yet: %v", e.Provider, e.Reason)
	}
	return fmt.Sprintf("cloud provider %s: %v", e.Provider, e.Reason)
}

func (e *Error) Unwrap() error { return e.Reason }

// Manager refreshes a provider's node addresses periodically.
type Manager struct {
	p        provider.Provider
	clock    clock.WithTicker
	freq     time.Duration
	timeout  time.Duration
	log      *slog.Logger
	syncs    *prometheus.CounterVec
	lastGood prometheus.Gauge

	mu      sync.Mutex
	addrs   []corev1.NodeAddress
	ok      bool  // a call has succeeded at least once
	lastErr error // of the latest call; nil after a success
	changed chan struct{}
}

// Option configures New.
type Option func(*Manager)

// WithClock injects the clock that paces refreshes (tests use a fake one).
func WithClock(c clock.WithTicker) Option { return func(m *Manager) { m.clock = c } }

// WithSyncFrequency sets how often the provider is asked.
func WithSyncFrequency(d time.Duration) Option { return func(m *Manager) { m.freq = d } }

// WithProviderTimeout bounds each provider call.
func WithProviderTimeout(d time.Duration) Option { return func(m *Manager) { m.timeout = d } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(m *Manager) { m.log = l } }

// WithRegistry registers the manager's metrics in reg.
func WithRegistry(reg prometheus.Registerer) Option {
	return func(m *Manager) { reg.MustRegister(m.syncs, m.lastGood) }
}

// New returns a manager for p; call Run to start refreshing.
func New(p provider.Provider, opts ...Option) *Manager {
	m := &Manager{
		p:       p,
		clock:   clock.RealClock{},
		freq:    DefaultSyncFrequency,
		timeout: DefaultProviderTimeout,
		log:     slog.Default(),
		changed: make(chan struct{}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "cloudsyncd", Name: "address_syncs_total",
			Help: "Calls to the cloud provider for node addresses, by result.",
		}, []string{"result"}),
		lastGood: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "cloudsyncd", Name: "address_last_success_timestamp_seconds",
			Help: "Unix time of the last successful address refresh.",
		}),
	}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Provider returns the provider the manager asks.
func (m *Manager) Provider() provider.Provider { return m.p }

// Run refreshes now and then every sync frequency until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	t := m.clock.NewTicker(m.freq)
	defer t.Stop()
	for {
		m.Sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// Sync asks the provider once and records the answer.
func (m *Manager) Sync(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, m.timeout)
	addrs, err := m.p.NodeAddresses(cctx)
	cancel()
	if err == nil {
		err = provider.ValidateAddresses("addresses", addrs)
	}
	if err == nil && len(addrs) == 0 {
		err = errors.New("no addresses")
	}
	if ctx.Err() != nil {
		return // shutting down: not the provider's fault
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.syncs.WithLabelValues("error").Inc()
		if m.lastErr == nil || m.lastErr.Error() != err.Error() {
			m.log.Warn("cloud provider failed to return node addresses", "provider", m.p.Name(), "err", err, "keeping_last_good", m.ok)
		}
		m.lastErr = err
	} else {
		m.syncs.WithLabelValues("success").Inc()
		m.lastGood.Set(float64(m.clock.Now().Unix()))
		if m.lastErr != nil || !m.ok {
			m.log.Info("cloud provider returned node addresses", "provider", m.p.Name(), "addresses", addrs)
		}
		m.addrs, m.ok, m.lastErr = addrs, true, nil
	}
	close(m.changed)
	m.changed = make(chan struct{})
}

// state returns the current answer and a channel closed at the next one.
func (m *Manager) state() snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	return snapshot{addrs: slices.Clone(m.addrs), ok: m.ok, err: m.lastErr, next: m.changed}
}

// snapshot is the manager's state at one moment; next closes at the next one.
type snapshot struct {
	addrs []corev1.NodeAddress
	ok    bool
	err   error
	next  <-chan struct{}
}

// LastError is the error of the latest provider call, nil after a success.
func (m *Manager) LastError() error {
	return m.state().err
}

// NodeAddresses returns the last good addresses. Before the first success it
// waits for the provider's first answer until ctx ends (at most a minute),
// then returns an *Error carrying the provider's reason.
func (m *Manager) NodeAddresses(ctx context.Context) ([]corev1.NodeAddress, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, maxWait)
		defer cancel()
	}
	for {
		st := m.state()
		switch {
		case st.ok:
			return st.addrs, nil
		case st.err != nil:
			return nil, &Error{Provider: m.p.Name(), Reason: st.err}
		}
		select {
		case <-ctx.Done():
			return nil, &Error{Provider: m.p.Name(), Reason: ctx.Err(), Pending: true}
		case <-st.next:
		}
	}
}

// Watch calls send with the addresses once there are good ones, then again
// each time they change, until ctx ends or send fails.
func (m *Manager) Watch(ctx context.Context, send func([]corev1.NodeAddress) error) error {
	var last []corev1.NodeAddress
	sent := false
	for {
		st := m.state()
		if st.ok && (!sent || !provider.EqualAddresses(last, st.addrs)) {
			if err := send(st.addrs); err != nil {
				return err
			}
			last, sent = st.addrs, true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-st.next:
		}
	}
}

// InstanceMetadata asks the provider for the instance's identity, bounded by
// the provider timeout. Addresses the provider leaves out are filled from the
// last good node addresses.
func (m *Manager) InstanceMetadata(ctx context.Context) (*provider.Metadata, error) {
	cctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	md, err := m.p.InstanceMetadata(cctx)
	if err != nil {
		return nil, &Error{Provider: m.p.Name(), Reason: err}
	}
	if len(md.Addresses) == 0 {
		if st := m.state(); st.ok {
			md.Addresses = st.addrs
		}
	}
	return md, nil
}

// InstanceShutdown asks the provider whether the instance is shut down,
// bounded by the provider timeout.
func (m *Manager) InstanceShutdown(ctx context.Context) (bool, error) {
	cctx, cancel := context.WithTimeout(ctx, m.timeout)
	defer cancel()
	down, err := m.p.InstanceShutdown(cctx)
	if err != nil {
		return false, &Error{Provider: m.p.Name(), Reason: err}
	}
	return down, nil
}
