package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/testenv"
	podsyncv1 "github.com/microlet/microlet/proto/microlet/podsync/v1"
)

// TestHandlersDuringStartup: nodestatusd polls GetNodePressure from
// podsyncd's start on, while Run is still building the eviction manager and
// the sync loop. The handlers are called over the real socket without pause
// from before the runtime answers until both are published and a while
// after; under -race any unsynchronised hand-over fails the test, and a Run
// that never publishes them fails it too. The CRI is a stand-in
// (servicetest.ServeConnectOnlyCRI) that answers what criclient.Connect
// asks and nothing more: the test is about podsyncd's start-up, not the
// runtime. The peers (podconfig, statusd, nodestatusd) are absent, as at a
// cold start.
//
// The race detector sees a race only when the two accesses happen to meet,
// so the start-up is run a few times.
func TestHandlersDuringStartup(t *testing.T) {
	for i := range 5 {
		t.Run(fmt.Sprint(i), startUpWhileCalled)
	}
}

func startUpWhileCalled(t *testing.T) {
	dir := testenv.ShortDir(t, "psd")
	s, client := startInDir(t, dir)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	errs := make(chan error, 2)
	for _, call := range []func() error{
		func() error { _, err := client.GetNodePressure(ctx, &podsyncv1.GetNodePressureRequest{}); return err },
		func() error { _, err := client.ListPodWorkers(ctx, &podsyncv1.ListPodWorkersRequest{}); return err },
	} {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := call(); err != nil && ctx.Err() == nil {
					errs <- err
					return
				}
			}
		})
	}
	// The runtime comes up only now: Run has been waiting for it while the
	// handlers were answering.
	servicetest.ServeConnectOnlyCRI(t, filepath.Join(dir, "runtime.sock"))
	testenv.Eventually(t, "eviction manager and sync loop published", time.Minute, func() error {
		select {
		case err := <-errs:
			t.Fatalf("handler failed during start-up: %v", err)
		default:
		}
		if s.evictions.Load() == nil || s.loop.Load() == nil {
			return errors.New("not yet")
		}
		return nil
	})
	// More calls against the published parts while Run starts them.
	for range 50 {
		if _, err := client.GetNodePressure(ctx, &podsyncv1.GetNodePressureRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := client.ListPodWorkers(ctx, &podsyncv1.ListPodWorkersRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("handler failed during start-up: %v", err)
	}
}

// startInDir runs podsyncd in the test's process (servicetest.Start: its
// grpcserver, interceptors and recovery) with its run dir, socket and data
// in dir, without cgroups, and connects to it. Run waits for a runtime at
// dir/runtime.sock (servicetest.ServeConnectOnlyCRI).
func startInDir(tb testing.TB, dir string) (*Server, podsyncv1.PodSyncServiceClient) {
	tb.Helper()
	s := New()
	s.cfg.RunDir = dir
	s.cfg.Socket = filepath.Join(dir, "podsyncd.sock")
	s.cfg.DataDir = filepath.Join(dir, "data")
	s.cfg.PodLogsDir = filepath.Join(dir, "pods")
	s.cfg.Logs.SymlinkDir = ""
	s.cfg.CgroupsPerQOS = false
	running := servicetest.Start(tb, s, s.cfg.Socket, servicetest.WithLogLevel(slog.LevelError))
	return s, podsyncv1.NewPodSyncServiceClient(running.Dial(tb))
}
