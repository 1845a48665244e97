package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/service/servicetest"
	"github.com/microlet/microlet/internal/socket"
	"github.com/microlet/microlet/internal/testenv"
	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
)

// FuzzPodConfigAPI sends arbitrary ListPods, SourcesReady and Watch
// requests (method 0, 1, 2) to a real podconfig (servicetest.Start: its
// grpcserver, limits and recovery included) serving one static pod. None
// may fail or panic (recovery would answer Internal); a Watch resuming
// from anywhere but the current sequence gets its first message at once:
// the updates after it or a snapshot, never an error.
func FuzzPodConfigAPI(f *testing.F) {
	run := testenv.ShortDir(f, "pcfz")
	dir := filepath.Join(run, "manifests")
	if err := os.Mkdir(dir, 0o755); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(manifestYAML("web", "nginx", "fuzz")), 0o644); err != nil {
		f.Fatal(err)
	}
	s := New()
	s.cfg.NodeName = "node1"
	s.cfg.ManifestDir = dir
	s.cfg.FileCheckFrequency = time.Hour
	sock := filepath.Join(run, "pc.sock")
	servicetest.Start(f, s, sock, servicetest.WithLogLevel(slog.LevelWarn))
	cc, err := grpcclient.Dial(socket.Endpoint(sock))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = cc.Close() })
	c := podconfigv1.NewPodConfigServiceClient(cc)
	var seq uint64
	testenv.Eventually(f, "the static pod listed", wait, func() error {
		r, err := c.ListPods(context.Background(), &podconfigv1.ListPodsRequest{})
		if err == nil && len(r.GetPods()) == 0 {
			err = status.Error(codes.Unavailable, "no pods yet")
		}
		seq = r.GetSequence()
		return err
	})
	// What podsyncd and statusd send: a first watch, a resume from the last
	// sequence seen before a restart, and the list and readiness calls.
	for _, seed := range []struct {
		method uint8
		req    proto.Message
	}{
		{0, &podconfigv1.ListPodsRequest{}},
		{1, &podconfigv1.SourcesReadyRequest{}},
		{2, &podconfigv1.WatchRequest{}},
		{2, &podconfigv1.WatchRequest{ResumeAfter: seq}},
		{2, &podconfigv1.WatchRequest{ResumeAfter: seq + 1000}},
	} {
		b, err := proto.Marshal(seed.req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(seed.method, b)
	}
	unary := []func(context.Context, []byte) error{servicetest.FuzzCall(c.ListPods), servicetest.FuzzCall(c.SourcesReady)}
	f.Fuzz(func(t *testing.T, method uint8, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if m := method % 3; m < 2 {
			if err := unary[m](ctx, data); err != nil {
				t.Fatalf("method %d (%x): %v", m, data, err)
			}
			return
		}
		req := &podconfigv1.WatchRequest{}
		if proto.Unmarshal(data, req) != nil {
			return
		}
		w, err := c.Watch(ctx, req)
		if err != nil {
			t.Fatalf("Watch(%v): %v", req, err)
		}
		if req.GetResumeAfter() == seq {
			return // up to date: nothing to send until the pods change
		}
		ev, err := w.Recv()
		if err != nil {
			t.Fatalf("Watch(%v): first message: %v", req, err)
		}
		if !ev.GetResync() && ev.GetSequence() <= req.GetResumeAfter() {
			t.Fatalf("Watch(%v): sequence %d is not after the resume point and not a snapshot", req, ev.GetSequence())
		}
	})
}
