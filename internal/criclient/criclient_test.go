package criclient

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/testenv"
)

// cri serves Version and ImageFsInfo, the two calls Connect and
// cri-client's constructors make.
type cri struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer
}

func (cri) Version(context.Context, *runtimeapi.VersionRequest) (*runtimeapi.VersionResponse, error) {
	return &runtimeapi.VersionResponse{Version: "0.1.0", RuntimeName: "fake", RuntimeVersion: "1.0", RuntimeApiVersion: "v1"}, nil
}

func (cri) ImageFsInfo(context.Context, *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return &runtimeapi.ImageFsInfoResponse{}, nil
}

// serve starts the CRI on a real unix socket at path.
func serve(t *testing.T, path string, image bool) {
	t.Helper()
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(srv, cri{})
	if image {
		runtimeapi.RegisterImageServiceServer(srv, cri{})
	}
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
}

// warnings is a logger whose warnings arrive on a channel.
type warnings chan slog.Record

func (w warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w warnings) Handle(_ context.Context, r slog.Record) error {
	select {
	case w <- r:
	default: // nobody counting any more
	}
	return nil
}
func (w warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w warnings) WithGroup(string) slog.Handler      { return w }

func endpointOf(r slog.Record) string {
	var ep string
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "endpoint" {
			ep = a.Value.String()
		}
		return true
	})
	return ep
}

type result struct {
	svc *Services
	err error
}

func connect(ctx context.Context, rt, img string, w warnings) chan result {
	done := make(chan result, 1)
	go func() {
		svc, err := Connect(ctx, rt, img, time.Minute, slog.New(w), WithAttemptTimeout(300*time.Millisecond))
		done <- result{svc, err}
	}()
	return done
}

// awaitWarnings takes n warnings, each naming endpoint, from w.
func awaitWarnings(t *testing.T, w warnings, n int, endpoint string) {
	t.Helper()
	for range n {
		select {
		case r := <-w:
			if got := endpointOf(r); got != endpoint {
				t.Fatalf("warning %q names endpoint %q, want %q", r.Message, got, endpoint)
			}
		case <-time.After(time.Minute):
			t.Fatalf("no warning naming %s", endpoint)
		}
	}
}

// A runtime whose socket does not exist yet: Connect warns, naming the
// endpoint, keeps trying, and hands out working services once the runtime
// serves.
func TestConnectWaitsForRuntime(t *testing.T) {
	path := filepath.Join(testenv.ShortDir(t, "cri"), "rt.sock")
	ep := "unix://" + path
	w := make(warnings, 16)
	done := connect(context.Background(), ep, "", w)
	awaitWarnings(t, w, 2, ep)
	serve(t, path, true)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.svc.Close()
	if r.svc.Version.GetRuntimeName() != "fake" {
		t.Fatalf("version %v", r.svc.Version)
	}
	if _, err := r.svc.Images.ImageFsInfo(context.Background()); err != nil {
		t.Fatalf("image service: %v", err)
	}
}

// A socket that accepts and never answers (a hung runtime): Connect keeps
// warning and returns only when its context ends, with an error naming the
// endpoint.
func TestConnectHungRuntimeUntilCancel(t *testing.T) {
	path := filepath.Join(testenv.ShortDir(t, "cri"), "rt.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan net.Conn, 64) // accepted, held open, never answered
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				close(held)
				return
			}
			held <- c
		}
	}()
	defer func() {
		_ = lis.Close()
		for c := range held {
			_ = c.Close()
		}
	}()
	ep := "unix://" + path
	ctx, cancel := context.WithCancel(context.Background())
	w := make(warnings, 16)
	done := connect(ctx, ep, "", w)
	awaitWarnings(t, w, 3, ep)
	cancel()
	r := <-done
	if !errors.Is(r.err, context.Canceled) || !strings.Contains(r.err.Error(), path) {
		t.Fatalf("got %v, want the cancellation naming %s", r.err, path)
	}
}

// A separate image endpoint that is not there yet: the warnings name it,
// and Connect returns once it serves.
func TestConnectWaitsForImageEndpoint(t *testing.T) {
	dir := testenv.ShortDir(t, "cri")
	rtPath, imgPath := filepath.Join(dir, "rt.sock"), filepath.Join(dir, "img.sock")
	serve(t, rtPath, false)
	w := make(warnings, 16)
	done := connect(context.Background(), "unix://"+rtPath, "unix://"+imgPath, w)
	awaitWarnings(t, w, 2, "unix://"+imgPath)
	serve(t, imgPath, true)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.svc.Close()
}

func TestConnectBadEndpoint(t *testing.T) {
	_, err := Connect(context.Background(), "tcp://127.0.0.1:1", "", time.Minute, slog.New(make(warnings)))
	if err == nil || !strings.Contains(err.Error(), "runtime endpoint") {
		t.Fatalf("got %v, want an error naming the runtime endpoint", err)
	}
}

// TryConnect against an endpoint that accepts connections but never speaks
// gRPC fails each time naming it, and every connection it opened is closed
// again: retrying it on a schedule leaks nothing (cri-client's constructors
// alone would leave one reconnecting connection per attempt).
func TestTryConnectLeavesNothingOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mute.sock")
	lis, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lis.Close() })
	var (
		open     = make(chan int, 64)
		accepted int
	)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			open <- 1
			go func() {
				// Read until the client closes its end; answer nothing.
				buf := make([]byte, 1024)
				for {
					if _, err := c.Read(buf); err != nil {
						_ = c.Close()
						open <- -1
						return
					}
				}
			}()
		}
	}()
	const attempts = 5
	for range attempts {
		_, err := TryConnect(context.Background(), "unix://"+path, "", time.Minute, 200*time.Millisecond)
		var ee *EndpointError
		if !errors.As(err, &ee) || ee.Role != "runtime" || ee.Endpoint != "unix://"+path || ee.Malformed {
			t.Fatalf("TryConnect = %v, want a runtime EndpointError naming unix://%s", err, path)
		}
	}
	// A gRPC client gives a handshake that gets no answer 20 s before it
	// drops the connection itself, so a connection seen closed well before
	// that was closed by TryConnect.
	live := 0
	testenv.Eventually(t, "every connection TryConnect opened closed", 10*time.Second, func() error {
		for {
			select {
			case d := <-open:
				live += d
				if d > 0 {
					accepted++
				}
				continue
			default:
			}
			break
		}
		if accepted == 0 || live != 0 {
			return fmt.Errorf("connections accepted %d, still open %d", accepted, live)
		}
		return nil
	})
}
