package server

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/runtime-shim/internal/cni"
	"github.com/microlet/microlet/services/runtime-shim/internal/docker"
	"github.com/microlet/microlet/services/runtime-shim/internal/forward"
	"github.com/microlet/microlet/services/runtime-shim/internal/streaming"
)

// Backends.
const (
	BackendDocker  = "docker"
	BackendForward = "forward"
)

// Config is runtime-shim's configuration.
type Config struct {
	service.Common `yaml:",inline"`

	Backend           string `yaml:"backend" flag:"backend" usage:"CRI backend: docker (the Docker Engine) or forward (another CRI endpoint)"`
	ForwardEndpoint   string `yaml:"forward_endpoint" flag:"forward-endpoint" usage:"CRI endpoint the forward backend relays to (unix:///path)"`
	DockerHost        string `yaml:"docker_host" flag:"docker-host" usage:"Docker endpoint (default: DOCKER_HOST or unix:///var/run/docker.sock)"`
	DockerInstance    string `yaml:"docker_instance" flag:"docker-instance" usage:"value of the instance label on every Docker object; shims sharing one Docker must differ"`
	PauseImage        string `yaml:"pause_image" flag:"pause-image" usage:"image of the pod sandbox (pause) containers; built from our pause program when missing"`
	PauseBinary       string `yaml:"pause_binary" flag:"pause-binary" usage:"static pause program to import as the pause image (default: bin/pause next to the binary, else built with go)"`
	RegistryMirrors   string `yaml:"registry_mirrors" flag:"registry-mirrors" usage:"comma-separated registry=mirror pairs PullImage fetches from instead (e.g. registry.k8s.io=127.0.0.1:5000)"`
	DockerLogMaxSize  string `yaml:"docker_log_max_size" flag:"docker-log-max-size" usage:"size at which Docker rotates a container's json-file log (its copy the CRI log is made from)"`
	DockerLogMaxFiles int    `yaml:"docker_log_max_files" flag:"docker-log-max-files" usage:"json-file logs Docker keeps per container; with the max size this bounds Docker's copy and how much output a stopped runtime-shim can still copy when it restarts"`
	StreamingAddr     string `yaml:"streaming_addr" flag:"streaming-addr" usage:"host:port of the Exec/Attach/PortForward streaming server (port 0 picks one)"`
	NetworkPlugin     string `yaml:"network_plugin" flag:"network-plugin" usage:"pod network of the docker backend: docker (Docker's bridge) or cni (CNI plugins)"`
	CNIConfDir        string `yaml:"cni_conf_dir" flag:"cni-conf-dir" usage:"CNI network configuration directory (the lexically first valid file is used)"`
	CNIBinDir         string `yaml:"cni_bin_dir" flag:"cni-bin-dir" usage:"comma-separated directories searched for CNI plugins"`
	PodNetwork        string `yaml:"pod_network" flag:"pod-network" usage:"with network_plugin cni: bridge writes a bridge+host-local network config for the node's pod CIDRs when no other config is installed; empty leaves the config to the operator"`
	CNIBridge         string `yaml:"cni_bridge" flag:"cni-bridge" usage:"bridge device of the pod_network bridge config"`
}

// Network plugins of the docker backend.
const (
	NetworkPluginDocker = "docker"
	NetworkPluginCNI    = "cni"
)

// Server is the runtime-shim service.
type Server struct {
	cfg Config

	docker  *docker.Backend
	forward *forward.Forwarder
	stream  *streaming.Server
}

// New returns the service with its defaults.
func New() *Server {
	return &Server{cfg: Config{
		Common:            service.DefaultCommon(),
		Backend:           BackendDocker,
		DockerInstance:    "default",
		PauseImage:        docker.DefaultPauseImage,
		StreamingAddr:     "127.0.0.1:0",
		DockerLogMaxSize:  docker.DefaultLogMaxSize,
		DockerLogMaxFiles: docker.DefaultLogMaxFiles,
		NetworkPlugin:     NetworkPluginDocker,
		CNIConfDir:        cni.DefaultConfDir,
		CNIBinDir:         cni.DefaultBinDir,
		CNIBridge:         cni.DefaultBridge,
	}}
}

// Name implements service.Service.
func (s *Server) Name() string { return components.RuntimeShim }

// Config implements service.Service.
func (s *Server) Config() service.CommonConfig { return &s.cfg }

// Register implements service.Service: it checks the configuration and
// registers the backend's CRI services.
func (s *Server) Register(env *service.Env) error {
	switch s.cfg.Backend {
	case BackendDocker:
		mirrors, err := parseMirrors(s.cfg.RegistryMirrors)
		if err != nil {
			return err
		}
		netPlugin, err := s.networkPlugin(env)
		if err != nil {
			return err
		}
		b, err := docker.New(docker.Options{Mirrors: mirrors,
			Host: s.cfg.DockerHost, DataDir: filepath.Join(s.cfg.DataDir, components.RuntimeShim),
			Instance: s.cfg.DockerInstance, PauseImage: s.cfg.PauseImage, PauseBinary: s.cfg.PauseBinary, Log: env.Log,
			LogMaxSize: s.cfg.DockerLogMaxSize, LogMaxFiles: s.cfg.DockerLogMaxFiles, Network: netPlugin,
		})
		if err != nil {
			return err
		}
		st, err := streaming.Start(s.cfg.StreamingAddr, docker.StreamRuntime{B: b}, env.Log)
		if err != nil {
			return fmt.Errorf("streaming_addr %q: %w", s.cfg.StreamingAddr, err)
		}
		b.SetStreamer(st)
		s.docker, s.stream = b, st
		runtimeapi.RegisterRuntimeServiceServer(env.Server.GRPC(), b)
		runtimeapi.RegisterImageServiceServer(env.Server.GRPC(), b)
	case BackendForward:
		if s.cfg.ForwardEndpoint == "" {
			return fmt.Errorf("forward_endpoint: required with backend %q", BackendForward)
		}
		f, err := forward.New(s.cfg.ForwardEndpoint, env.Registry)
		if err != nil {
			return fmt.Errorf("forward_endpoint: %w", err)
		}
		s.forward = f
		if err := f.Register(env.Server.GRPC()); err != nil {
			return err
		}
	default:
		return fmt.Errorf("backend: %q is not one of %q, %q", s.cfg.Backend, BackendDocker, BackendForward)
	}
	return nil
}

// Run implements service.Service: it waits (with backoff) for the backend
// to answer, marks the service ready, and closes the backend on stop.
func (s *Server) Run(ctx context.Context, env *service.Env) error {
	defer s.close()
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 1 << 30, Cap: 10 * time.Second}
	check := s.backendReady
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		if err := check(ctx); err != nil {
			env.Log.Warn("runtime backend not ready, retrying", "backend", s.cfg.Backend, "err", err)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	env.Ready()
	<-ctx.Done()
	return nil
}

// networkPlugin builds the cni network mode's plugin manager; nil for
// Docker's bridge.
func (s *Server) networkPlugin(env *service.Env) (docker.NetworkPlugin, error) {
	switch s.cfg.NetworkPlugin {
	case NetworkPluginDocker, "":
		if s.cfg.PodNetwork != "" {
			return nil, fmt.Errorf("pod_network: %q needs network_plugin %q", s.cfg.PodNetwork, NetworkPluginCNI)
		}
		return nil, nil
	case NetworkPluginCNI:
	default:
		return nil, fmt.Errorf("network_plugin: %q is not one of %q, %q", s.cfg.NetworkPlugin, NetworkPluginDocker, NetworkPluginCNI)
	}
	var bins []string
	for _, d := range strings.Split(s.cfg.CNIBinDir, ",") {
		if d = strings.TrimSpace(d); d != "" {
			bins = append(bins, d)
		}
	}
	m, err := cni.New(cni.Options{
		ConfDir: s.cfg.CNIConfDir, BinDirs: bins, PodNetwork: s.cfg.PodNetwork, Bridge: s.cfg.CNIBridge,
		DataDir: filepath.Join(s.cfg.DataDir, components.RuntimeShim, "cni"), Log: env.Log,
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// parseMirrors parses "registry=mirror,registry=mirror".
func parseMirrors(v string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(v, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		from, to, ok := strings.Cut(pair, "=")
		if !ok || from == "" || to == "" || strings.Contains(to, "/") {
			return nil, fmt.Errorf("registry_mirrors: %q is not registry=host[:port]", pair)
		}
		out[from] = to
	}
	return out, nil
}

func (s *Server) backendReady(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if s.docker != nil {
		if err := s.docker.Ping(cctx); err != nil {
			return err
		}
		return s.docker.Start(cctx)
	}
	_, err := runtimeapi.NewRuntimeServiceClient(s.forward.Conn()).Version(cctx, &runtimeapi.VersionRequest{})
	return err
}

func (s *Server) close() {
	if s.stream != nil {
		_ = s.stream.Close()
	}
	if s.docker != nil {
		_ = s.docker.Close()
	}
	if s.forward != nil {
		_ = s.forward.Close()
	}
}
