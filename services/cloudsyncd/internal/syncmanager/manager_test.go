package syncmanager

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
)

// scripted is a provider whose answers the test sets; block makes calls wait
// until the context ends or the gate opens.
type scripted struct {
	mu    sync.Mutex
	addrs []corev1.NodeAddress
	err   error
	gate  chan struct{}
	calls int
}

func (s *scripted) Name() string { return "scripted" }
func (s *scripted) set(addrs []corev1.NodeAddress, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addrs, s.err = addrs, err
}
func (s *scripted) NodeAddresses(ctx context.Context) ([]corev1.NodeAddress, error) {
	s.mu.Lock()
	gate := s.gate
	s.calls++
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs, s.err
}
func (s *scripted) InstanceMetadata(context.Context) (*provider.Metadata, error) {
	return &provider.Metadata{ProviderID: "scripted://x"}, nil
}
func (s *scripted) InstanceShutdown(context.Context) (bool, error) { return false, nil }
func (s *scripted) Close() error                                   { return nil }
func (s *scripted) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

func ip(a string) []corev1.NodeAddress {
	return []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: a}}
}

// start runs m with a fake clock and returns a function that advances one
// sync period and waits until the provider has been asked again.
func start(t *testing.T, p *scripted, opts ...Option) (*Manager, func()) {
	t.Helper()
	fc := clocktesting.NewFakeClock(time.Unix(1000, 0))
	m := New(p, append([]Option{WithClock(fc), WithProviderTimeout(30 * time.Second)}, opts...)...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	step := func() {
		t.Helper()
		waitFor(t, fc.HasWaiters)
		next := m.state().next
		fc.Step(DefaultSyncFrequency)
		select {
		case <-next:
		case <-time.After(60 * time.Second):
			t.Fatal("no sync after a clock step")
		}
	}
	return m, step
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, "condition", 60*time.Second, func() error {
		if cond() {
			return nil
		}
		return errors.New("not yet")
	})
}

func TestFailingProvider(t *testing.T) {
	p := &scripted{}
	p.set(nil, errors.New("metadata service down"))
	m, step := start(t, p)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := m.NodeAddresses(ctx)
	var se *Error
	if !errors.As(err, &se) || se.Pending || se.Reason.Error() != "metadata service down" {
		t.Fatalf("before the first success: got %v, want the provider's error", err)
	}

	p.set(ip("10.0.0.1"), nil)
	step()
	got, err := m.NodeAddresses(ctx)
	if err != nil || !provider.EqualAddresses(got, ip("10.0.0.1")) {
		t.Fatalf("after success: %v %v", got, err)
	}

	p.set(nil, errors.New("gone again"))
	step()
	got, err = m.NodeAddresses(ctx)
	if err != nil || !provider.EqualAddresses(got, ip("10.0.0.1")) {
		t.Fatalf("after a later failure the last good addresses must stay: %v %v", got, err)
	}
	if m.LastError() == nil {
		t.Fatal("LastError should report the later failure")
	}

	// Bad answers from a provider count as failures too.
	p.set([]corev1.NodeAddress{{Type: "Bogus", Address: "x"}}, nil)
	step()
	if got, _ := m.NodeAddresses(ctx); !provider.EqualAddresses(got, ip("10.0.0.1")) {
		t.Fatalf("an invalid answer replaced the good one: %v", got)
	}
}

func TestDeadlineHonoured(t *testing.T) {
	p := &scripted{gate: make(chan struct{})}
	p.set(ip("10.0.0.2"), nil)
	m, _ := start(t, p)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := m.NodeAddresses(ctx)
	var se *Error
	if !errors.As(err, &se) || !se.Pending || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want a pending error with the deadline", err)
	}

	// A caller with time left gets the answer once it comes.
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		_, err := m.NodeAddresses(ctx)
		res <- err
	}()
	close(p.gate)
	if err := <-res; err != nil {
		t.Fatalf("waiting caller: %v", err)
	}
}

func TestProviderTimeout(t *testing.T) {
	p := &scripted{gate: make(chan struct{})} // never opens
	m, _ := start(t, p, WithProviderTimeout(20*time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := m.NodeAddresses(ctx)
	var se *Error
	if !errors.As(err, &se) || se.Pending || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the provider call's own timeout", err)
	}
}

func TestWatchSendsChangesOnly(t *testing.T) {
	p := &scripted{}
	p.set(ip("10.0.0.1"), nil)
	m, step := start(t, p)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan []corev1.NodeAddress, 16)
	go func() {
		_ = m.Watch(ctx, func(a []corev1.NodeAddress) error { got <- a; return nil })
	}()
	expect := func(want string) {
		t.Helper()
		select {
		case a := <-got:
			if !provider.EqualAddresses(a, ip(want)) {
				t.Fatalf("watch sent %v, want %s", a, want)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("watch sent nothing, want %s", want)
		}
	}
	expect("10.0.0.1")
	step() // unchanged
	step() // unchanged
	p.set(nil, errors.New("blip"))
	step() // failure: last good kept, nothing to send
	p.set(ip("10.0.0.9"), nil)
	step()
	expect("10.0.0.9")
	select {
	case a := <-got:
		t.Fatalf("watch sent %v although nothing changed", a)
	default:
	}
	if c := p.count(); c != 5 {
		t.Fatalf("provider asked %d times, want 5 (start + 4 periods)", c)
	}
}
