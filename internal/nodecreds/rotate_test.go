package nodecreds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"log/slog"
	"math/big"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/certificate"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/testenv"
)

// fakeManager stands in for client-go's certificate manager: it hands out
// a certificate (nil once expired, as the real one does) and records
// whether it runs.
type fakeManager struct {
	mu               sync.Mutex
	cert             *tls.Certificate
	started, stopped bool
	clock            *testingclock.FakeClock
}

func (f *fakeManager) Start() { f.mu.Lock(); f.started = true; f.mu.Unlock() }
func (f *fakeManager) Stop()  { f.mu.Lock(); f.stopped = true; f.mu.Unlock() }
func (f *fakeManager) Current() *tls.Certificate {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cert != nil && f.clock.Now().After(f.cert.Leaf.NotAfter) {
		return nil
	}
	return f.cert
}
func (f *fakeManager) ServerHealthy() bool { return true }

func certValid(serial int64, from time.Time, life time.Duration) *tls.Certificate {
	return &tls.Certificate{Leaf: &x509.Certificate{SerialNumber: big.NewInt(serial), NotBefore: from, NotAfter: from.Add(life)}}
}

// TestRotationAfterTheClockJumps: the certificate manager waits for its
// rotation time on the monotonic clock, so a wall clock stepped forward
// (or a machine that slept) past the certificate's expiry would leave it
// waiting while the certificate has expired. With a 30-day certificate:
// a day in, and after a step back of a day, nothing happens; stepped
// forward 40 days, past its expiry, a new manager is started (it rotates
// at once, since the time has passed), once only while the certificate is
// the same; the renewed certificate is watched in its turn, stepped to 28
// days (past 90% of its life, the manager's latest rotation time).
func TestRotationAfterTheClockJumps(t *testing.T) {
	issued := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(issued.Add(time.Hour))
	first := &fakeManager{clock: clk, cert: certValid(1, issued, 30*24*time.Hour)}
	var made []*fakeManager
	r := &Rotator{cfg: Config{clock: clk, Log: slog.New(slog.DiscardHandler)}, mgr: first}
	r.newMgr = func() (certificate.Manager, error) {
		m := &fakeManager{clock: clk}
		made = append(made, m)
		return m, nil
	}
	check := func(what string, wantMade int) {
		t.Helper()
		r.checkWallClock()
		if len(made) != wantMade {
			t.Fatalf("%s: %d managers started, want %d", what, len(made), wantMade)
		}
	}
	check("an hour in", 0)
	clk.Step(24 * time.Hour)
	check("a day in", 0)
	clk.Step(-48 * time.Hour)
	check("stepped back two days, before the certificate", 0)
	clk.Step(40 * 24 * time.Hour)
	check("stepped forward 40 days, past its expiry", 1)
	if !first.stopped || !made[0].started || r.manager() != made[0] {
		t.Fatalf("old manager stopped %v, new one started %v and in use %v", first.stopped, made[0].started, r.manager() == made[0])
	}
	clk.Step(time.Minute)
	check("a minute later, the rotation not done yet", 1)

	// The new manager rotated: a certificate issued now.
	renewed := clk.Now()
	made[0].mu.Lock()
	made[0].cert = certValid(2, renewed, 30*24*time.Hour)
	made[0].mu.Unlock()
	clk.Step(26 * 24 * time.Hour)
	check("26 days into the renewed one", 1)
	clk.Step(2 * 24 * time.Hour)
	check("28 days into it: past the latest rotation time", 2)
}

// TestRotatorChecksEveryPeriod: Run checks the wall clock every
// WallCheckPeriod of its clock, and stops the manager in use at the end.
func TestRotatorChecksEveryPeriod(t *testing.T) {
	issued := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	clk := testingclock.NewFakeClock(issued)
	first := &fakeManager{clock: clk, cert: certValid(1, issued, 24*time.Hour)}
	next := &fakeManager{clock: clk}
	r := &Rotator{cfg: Config{clock: clk, Log: slog.New(slog.DiscardHandler)}, mgr: first,
		newMgr: func() (certificate.Manager, error) { return next, nil }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	testenv.Eventually(t, "the check's ticker", time.Minute, func() error {
		if !clk.HasWaiters() {
			return errors.New("no ticker yet")
		}
		return nil
	})
	clk.Step(48 * time.Hour) // past expiry; the ticker fires
	testenv.Eventually(t, "a new manager", time.Minute, func() error {
		if r.manager() != next {
			return errors.New("still the first manager")
		}
		return nil
	})
	cancel()
	<-done
	next.mu.Lock()
	defer next.mu.Unlock()
	if !next.started || !next.stopped {
		t.Fatalf("new manager started %v, stopped at the end %v", next.started, next.stopped)
	}
}
