package shimtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"google.golang.org/grpc"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/testenv"
	"github.com/microlet/microlet/internal/testenv/registry"
	"github.com/microlet/microlet/services/runtime-shim/internal/docker"
)

// Env is the per-process test environment.
type Env struct {
	// Bin is the built runtime-shim binary.
	Bin string
	// Instance is the docker_instance label of every shim this run starts.
	Instance string
	// Docker is a client of the Docker Engine.
	Docker *client.Client
	// Registry serves the test images.
	Registry *registry.Registry
	// Dir is a short temp dir for sockets and data.
	Dir string
}

var (
	mu      sync.Mutex
	env     *Env
	envErr  error
	started bool
	tmpRoot string
)

// Main runs the tests and removes the run's Docker objects afterwards.
func Main(m *testing.M) int {
	code := m.Run()
	mu.Lock()
	e := env
	mu.Unlock()
	if e != nil {
		e.Cleanup()
		if e.Registry != nil {
			_ = e.Registry.Close()
		}
		_ = e.Docker.Close()
	}
	if tmpRoot != "" {
		_ = os.RemoveAll(tmpRoot)
	}
	return code
}

// Get returns the environment, setting it up on first use. It skips the
// test when Docker or busybox-static is missing, unless
// MICROLET_REQUIRE_CONTROLPLANE=1, which turns that into a failure.
func Get(t testing.TB) *Env {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if !started {
		started = true
		env, envErr = setup()
	}
	if envErr != nil {
		testenv.RequireOrSkip(t, "runtime-shim test env unavailable: %v", envErr)
	}
	return env
}

func setup() (*Env, error) {
	if _, err := os.Stat(registry.BusyboxPath); err != nil {
		return nil, fmt.Errorf("busybox-static missing: %w", err)
	}
	dc, err := client.New(client.FromEnv)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := dc.Ping(ctx, client.PingOptions{}); err != nil {
		_ = dc.Close()
		return nil, fmt.Errorf("docker not reachable: %w", err)
	}
	tmpRoot, err = os.MkdirTemp("/tmp", "rs")
	if err != nil {
		_ = dc.Close()
		return nil, err
	}
	bin := filepath.Join(tmpRoot, "runtime-shim")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/microlet/microlet/services/runtime-shim")
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = dc.Close()
		return nil, fmt.Errorf("build runtime-shim: %v: %s", err, out)
	}
	reg, err := registry.New(context.Background())
	if err != nil {
		_ = dc.Close()
		return nil, err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return &Env{Bin: bin, Instance: "test-" + hex.EncodeToString(b), Docker: dc, Registry: reg, Dir: tmpRoot}, nil
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..")
}

// Cleanup removes every container of this run's instance and every image
// pulled from the run's registry. It runs from Main, after all tests.
func (e *Env) Cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := client.Filters{}
	f.Add("label", docker.LabelInstance+"="+e.Instance)
	if res, err := e.Docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f}); err == nil {
		for _, c := range res.Items {
			_, _ = e.Docker.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		}
	}
	if e.Registry != nil {
		e.RemoveRegistryImages(ctx)
	}
	_, _ = e.Docker.ImageRemove(ctx, e.PauseImage(), client.ImageRemoveOptions{Force: true})
}

// PauseImage is the run's own pause image, imported by the first shim and
// removed by Cleanup, so tests leave no image behind.
func (e *Env) PauseImage() string { return "microlet.local/pause:" + e.Instance }

// RemoveRegistryImages removes the images Docker pulled from the test registry.
func (e *Env) RemoveRegistryImages(ctx context.Context) {
	f := client.Filters{}
	f.Add("label", e.Registry.DockerImageFilter())
	res, err := e.Docker.ImageList(ctx, client.ImageListOptions{All: true, Filters: f})
	if err != nil {
		return
	}
	for _, img := range res.Items {
		_, _ = e.Docker.ImageRemove(ctx, img.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
	}
}

// Shim is a running runtime-shim process.
type Shim struct {
	Endpoint string
	Conn     *grpc.ClientConn
	Runtime  runtimeapi.RuntimeServiceClient
	Image    runtimeapi.ImageServiceClient
	DataDir  string
	cmd      *exec.Cmd
	done     chan struct{}
}

var seq int
var seqMu sync.Mutex

// StartShim starts runtime-shim with extra flags (default: Docker backend
// on this run's instance), waits until it is SERVING and stops it (SIGTERM,
// by PID) at the end of the test.
func (e *Env) StartShim(t testing.TB, args ...string) *Shim {
	t.Helper()
	seqMu.Lock()
	seq++
	n := seq
	seqMu.Unlock()
	dir := filepath.Join(e.Dir, fmt.Sprintf("s%d", n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "rt.sock")
	full := append([]string{"--socket=" + sock, "--run-dir=" + dir, "--data-dir=" + filepath.Join(dir, "data"),
		"--docker-instance=" + e.Instance, "--pause-image=" + e.PauseImage(), "--log-level=debug"}, args...)
	cmd := exec.Command(e.Bin, full...)
	logf, err := os.Create(filepath.Join(dir, "shim.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &Shim{Endpoint: "unix://" + sock, cmd: cmd, done: make(chan struct{}), DataDir: filepath.Join(dir, "data")}
	go func() { _ = cmd.Wait(); _ = logf.Close(); close(s.done) }()
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("runtime-shim log (%s):\n%s", logf.Name(), tail(b, 8000))
			}
		}
	})
	s.Conn, err = grpcclient.Dial(s.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := grpcclient.WaitServing(ctx, s.Conn, ""); err != nil {
		t.Fatalf("runtime-shim not serving: %v", err)
	}
	s.Runtime = runtimeapi.NewRuntimeServiceClient(s.Conn)
	s.Image = runtimeapi.NewImageServiceClient(s.Conn)
	return s
}

// Stop stops the shim with SIGTERM (SIGKILL after 15 s) and waits for it.
func (s *Shim) Stop() {
	if s.Conn != nil {
		_ = s.Conn.Close()
	}
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Kill stops the shim with SIGKILL, as a crash would.
func (s *Shim) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
