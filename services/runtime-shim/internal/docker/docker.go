package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/services/runtime-shim/internal/checkpoint"
	"github.com/microlet/microlet/services/runtime-shim/internal/crilog"
	"github.com/microlet/microlet/services/runtime-shim/internal/imagevolume"
)

// Options configure a Backend.
type Options struct {
	// Host is the Docker endpoint (unix:///var/run/docker.sock); empty uses
	// DOCKER_HOST or the default socket.
	Host string
	// DataDir holds the sandbox checkpoints.
	DataDir string
	// Instance is written into every object's instance label; only objects
	// with the same instance are visible to this backend.
	Instance string
	// PauseImage is the image of the sandbox containers; it is built from our
	// own pause program and imported when missing.
	PauseImage string
	// PauseBinary is a prebuilt static pause program; empty means look next to
	// the running executable, then build pause/ with the Go toolchain.
	PauseBinary string
	// Streamer turns Exec/Attach/PortForward requests into URLs of the
	// streaming server; nil leaves those calls Unimplemented.
	Streamer Streamer
	// Mirrors maps a registry host (gcr.io, registry.k8s.io) to a mirror
	// (host[:port]) PullImage fetches from instead; the image is then tagged
	// with the name the caller asked for.
	Mirrors map[string]string
	// Log is the logger; nil uses slog.Default.
	Log *slog.Logger
	// LogMaxSize and LogMaxFiles set the rotation of a container's json-file
	// log (empty/0: DefaultLogMaxSize, DefaultLogMaxFiles).
	LogMaxSize  string
	LogMaxFiles int
	// Network attaches pod-network sandboxes (the cni network mode); nil
	// leaves them on Docker's bridge.
	Network NetworkPlugin
}

// Streamer hands out URLs of the CRI streaming server (package streaming).
type Streamer interface {
	GetExec(*runtimeapi.ExecRequest) (*runtimeapi.ExecResponse, error)
	GetAttach(*runtimeapi.AttachRequest) (*runtimeapi.AttachResponse, error)
	GetPortForward(*runtimeapi.PortForwardRequest) (*runtimeapi.PortForwardResponse, error)
}

// DefaultPauseImage is the sandbox image unless configured otherwise.
const DefaultPauseImage = "microlet.local/pause:1.0"

// Backend implements runtimeapi.RuntimeServiceServer and ImageServiceServer.
type Backend struct {
	runtimeapi.UnimplementedRuntimeServiceServer
	runtimeapi.UnimplementedImageServiceServer

	opts  Options
	cli   *client.Client
	cp    *checkpoint.Store
	log   *slog.Logger
	pause sync.Mutex // serialises the pause-image import
	// remove serialises RemoveImage, so a call returns only once the image
	// is gone, not while a concurrent removal of it is still under way.
	remove sync.Mutex

	mu   sync.Mutex
	logs map[string]*follower // container ID -> CRI log follower

	// users are the containers' users as read while they ran, by
	// container ID, until removed (user.go).
	users sync.Map

	statsOnce  sync.Once
	statsState *statsState // samples and layer sizes shared by the stats calls

	// feat is what the daemon offers (API version, kernel), read once it
	// answers (rro.go).
	feat atomic.Pointer[daemonFeatures]

	imageVolumesOnce sync.Once
	imageVolumes     *imagevolume.Store // image mounts' extractions (imagevolumes.go)
	imageVolumesErr  error
}

var (
	_ runtimeapi.RuntimeServiceServer = (*Backend)(nil)
	_ runtimeapi.ImageServiceServer   = (*Backend)(nil)
)

// New connects to Docker (negotiating the API version down to what the daemon
// speaks, 1.41 for Engine 20.10) and opens the checkpoint store. It does not
// wait for Docker: calls answer Unavailable until it is up.
func New(opts Options) (*Backend, error) {
	if opts.Instance == "" {
		opts.Instance = "default"
	}
	if opts.PauseImage == "" {
		opts.PauseImage = DefaultPauseImage
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.LogMaxSize == "" {
		opts.LogMaxSize = DefaultLogMaxSize
	}
	if opts.LogMaxFiles <= 0 {
		opts.LogMaxFiles = DefaultLogMaxFiles
	}
	if opts.DataDir == "" {
		return nil, errors.New("docker backend: data dir is required")
	}
	copts := []client.Opt{client.FromEnv}
	if opts.Host != "" {
		copts = append(copts, client.WithHost(opts.Host))
	}
	cli, err := client.New(copts...)
	if err != nil {
		return nil, fmt.Errorf("docker client: %w", err)
	}
	cp, err := checkpoint.NewStore(filepath.Join(opts.DataDir, "sandboxes"), opts.Log)
	if err != nil {
		_ = cli.Close()
		return nil, err
	}
	return &Backend{opts: opts, cli: cli, cp: cp, log: opts.Log, logs: map[string]*follower{}}, nil
}

// Client is the Docker client (the benchmark compares against it).
func (b *Backend) Client() *client.Client { return b.cli }

// Instance is the instance label value of this backend.
func (b *Backend) Instance() string { return b.opts.Instance }

// Ping checks Docker is answering.
func (b *Backend) Ping(ctx context.Context) error {
	_, err := b.cli.Ping(ctx, client.PingOptions{})
	return err
}

// Start prepares the backend once Docker answers: it makes sure the pause
// image exists and resumes the CRI log followers of containers started
// before a restart.
func (b *Backend) Start(ctx context.Context) error {
	if err := b.ensurePauseImage(ctx); err != nil {
		return err
	}
	b.resumeLogs(ctx)
	b.reconcileNetwork(ctx)
	return nil
}

// Close stops the log followers and closes the Docker client.
func (b *Backend) Close() error {
	b.mu.Lock()
	fs := make([]*follower, 0, len(b.logs))
	for _, f := range b.logs {
		fs = append(fs, f)
	}
	b.logs = map[string]*follower{}
	b.mu.Unlock()
	for _, f := range fs {
		f.stop()
	}
	return b.cli.Close()
}

// toStatus maps a Docker error onto the CRI's gRPC codes.
func toStatus(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok && !isDockerErr(err) {
		return err
	}
	msg := fmt.Sprintf(format, args...) + ": " + err.Error()
	switch {
	case cerrdefs.IsNotFound(err):
		return status.Error(codes.NotFound, msg)
	case cerrdefs.IsConflict(err), cerrdefs.IsAlreadyExists(err):
		return status.Error(codes.AlreadyExists, msg)
	case cerrdefs.IsInvalidArgument(err):
		return status.Error(codes.InvalidArgument, msg)
	case cerrdefs.IsUnauthorized(err), cerrdefs.IsPermissionDenied(err):
		return status.Error(codes.PermissionDenied, msg)
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, msg)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, msg)
	case client.IsErrConnectionFailed(err):
		return status.Error(codes.Unavailable, msg)
	}
	return status.Error(codes.Unknown, msg)
}

func isDockerErr(err error) bool {
	return cerrdefs.IsNotFound(err) || cerrdefs.IsConflict(err) || cerrdefs.IsInvalidArgument(err) || client.IsErrConnectionFailed(err)
}

func notFound(what, id string) error {
	return status.Errorf(codes.NotFound, "%s %q not found", what, id)
}

func invalid(field, why string) error {
	return status.Errorf(codes.InvalidArgument, "%s: %s", field, why)
}

// follower copies one container's Docker log into its CRI log file.
type follower struct {
	copier *crilog.Copier
	cancel context.CancelFunc
	done   chan struct{}
}

func (f *follower) stop() {
	f.cancel()
	<-f.done
}

// wait waits for the follower to drain Docker's log (the container exited),
// at most d.
func (f *follower) wait(d time.Duration) {
	select {
	case <-f.done:
	case <-time.After(d):
	}
}

// SetStreamer sets the streaming server Exec/Attach/PortForward hand out URLs of.
func (b *Backend) SetStreamer(s Streamer) { b.opts.Streamer = s }
