package controlplane

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/microlet/microlet/internal/testenv"
)

// BenchmarkStartStop measures what every test package pays for its control
// plane: Start (etcd and apiserver up, /readyz, system namespaces) and Stop,
// plus an apiserver-only restart. Run it with a small fixed count, e.g.
//
//	go test -run '^$' -bench StartStop -benchtime 3x ./internal/testenv/controlplane/
func BenchmarkStartStop(b *testing.B) {
	var start, restart, stop time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		cp, err := Start(context.Background(), Options{})
		if errors.Is(err, ErrMissingBinary) {
			testenv.RequireOrSkip(b, "%v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := cp.StopAPIServer(); err != nil {
			b.Fatal(err)
		}
		if err := cp.StartAPIServer(); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if err := cp.Stop(); err != nil {
			b.Fatal(err)
		}
		start += t1.Sub(t0)
		restart += t2.Sub(t1)
		stop += time.Since(t2)
	}
	n := float64(b.N)
	b.ReportMetric(start.Seconds()/n, "start-s/op")
	b.ReportMetric(restart.Seconds()/n, "apiserver-restart-s/op")
	b.ReportMetric(stop.Seconds()/n, "stop-s/op")
}

// BenchmarkStartStopFull measures the cluster GetFull and the dev control
// plane run: Start with the scheduler and the controller manager (each up
// to its /healthz), then Stop of all four.
//
//	go test -run '^$' -bench StartStopFull -benchtime 3x ./internal/testenv/controlplane/
func BenchmarkStartStopFull(b *testing.B) {
	var start, stop time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		cp, err := Start(context.Background(), Options{Scheduler: true, ControllerManager: true})
		if errors.Is(err, ErrMissingBinary) {
			testenv.RequireOrSkip(b, "%v", err)
		}
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := cp.Stop(); err != nil {
			b.Fatal(err)
		}
		start += t1.Sub(t0)
		stop += time.Since(t1)
	}
	n := float64(b.N)
	b.ReportMetric(start.Seconds()/n, "start-s/op")
	b.ReportMetric(stop.Seconds()/n, "stop-s/op")
}
