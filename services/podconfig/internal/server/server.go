package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/kubeclient"
	"github.com/microlet/microlet/internal/podsource"
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/podconfig/internal/merge"
	"github.com/microlet/microlet/services/podconfig/internal/sources"
	"github.com/microlet/microlet/services/podconfig/internal/stream"
)

// Config is podconfig's configuration.
type Config struct {
	service.Common `yaml:",inline"`

	ManifestDir        string            `yaml:"manifest_dir" flag:"manifest-dir" usage:"directory (or single file) of static pod manifests (empty: no file source)"`
	ManifestURL        string            `yaml:"manifest_url" flag:"manifest-url" usage:"URL of a static pod manifest or PodList (empty: no http source)"`
	ManifestURLHeaders map[string]string `yaml:"manifest_url_headers" flag:"manifest-url-headers" usage:"HTTP headers sent to manifest_url (key=value,...)"`
	FileCheckFrequency time.Duration     `yaml:"file_check_frequency" flag:"file-check-frequency" usage:"how often manifest_dir is re-listed besides inotify"`
	HTTPCheckFrequency time.Duration     `yaml:"http_check_frequency" flag:"http-check-frequency" usage:"how often manifest_url is polled"`
}

// Server is the podconfig service.
type Server struct {
	cfg Config

	storage *merge.Storage
	stream  *stream.Stream
	metrics *metrics
	state   *sourceState
	client  kubernetes.Interface

	// streamOpts lets tests shrink the ring and the watcher queues.
	streamOpts []stream.Option
}

// New returns the service with its defaults.
func New() *Server {
	return &Server{cfg: Config{
		Common:             service.DefaultCommon(),
		FileCheckFrequency: 20 * time.Second,
		HTTPCheckFrequency: 20 * time.Second,
	}}
}

// Name implements service.Service.
func (s *Server) Name() string { return components.PodConfig }

// Config implements service.Service.
func (s *Server) Config() service.CommonConfig { return &s.cfg }

// Register implements service.Service: it checks the config and registers
// PodConfigService.
func (s *Server) Register(env *service.Env) error {
	c := &s.cfg
	if c.FileCheckFrequency <= 0 {
		return fmt.Errorf("file_check_frequency must be positive, got %s", c.FileCheckFrequency)
	}
	if c.HTTPCheckFrequency <= 0 {
		return fmt.Errorf("http_check_frequency must be positive, got %s", c.HTTPCheckFrequency)
	}
	if c.ManifestURL != "" {
		u, err := url.Parse(c.ManifestURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("manifest_url %q: want an http:// or https:// URL", c.ManifestURL)
		}
	} else if len(c.ManifestURLHeaders) > 0 {
		return errors.New("manifest_url_headers given without manifest_url")
	}
	var configured []string
	if c.ManifestDir != "" {
		configured = append(configured, podsource.FileSource)
	}
	if c.ManifestURL != "" {
		configured = append(configured, podsource.HTTPSource)
	}
	if c.Kubeconfig != "" {
		cs, _, err := kubeclient.Clientset(c.Kubeconfig, components.PodConfig, 20, 40)
		if err != nil {
			return err
		}
		s.client = cs
		configured = append(configured, podsource.APISource)
	}
	slices.Sort(configured)

	s.metrics = newMetrics(env.Registry)
	s.storage = merge.New()
	s.state = newSourceState(configured, s.metrics)
	s.stream = stream.New(s.storage, append([]stream.Option{stream.WithHooks(stream.Hooks{
		Update: func(op merge.Op, source string, _ int) {
			s.metrics.updates.WithLabelValues(op.String(), source).Inc()
		},
		Resync: func(reason string) { s.metrics.resyncs.WithLabelValues(reason).Inc() },
		Refused: func(r merge.Refusal) {
			s.state.Error(r.Source, r.Pod.Namespace+"/"+r.Pod.Name, errors.New(r.Reason))
			env.Log.Warn("pod refused", "source", r.Source, "pod", r.Pod.Namespace+"/"+r.Pod.Name, "reason", r.Reason)
		},
		Watchers: func(n int) { s.metrics.watchers.Set(float64(n)) },
	})}, s.streamOpts...)...)
	podconfigv1.RegisterPodConfigServiceServer(env.Server.GRPC(), &api{s: s})
	return nil
}

// Run implements service.Service: it runs the sources until ctx ends.
func (s *Server) Run(ctx context.Context, env *service.Env) error {
	c := &s.cfg
	apply := func(source string, pods []*corev1.Pod) {
		s.stream.Apply(source, pods)
		s.metrics.pods.WithLabelValues(source).Set(float64(s.storage.Count(source)))
	}
	var wg sync.WaitGroup
	run := func(name string, f func(context.Context) error) {
		wg.Go(func() {
			if err := f(ctx); err != nil {
				env.Log.Error("source stopped", "source", name, "err", err)
			}
		})
	}
	if c.ManifestDir != "" {
		f := &sources.File{Path: c.ManifestDir, NodeName: c.NodeName, Period: c.FileCheckFrequency,
			Log: env.Log.With("source", podsource.FileSource), Report: s.state}
		run(podsource.FileSource, func(ctx context.Context) error { return f.Run(ctx, apply) })
		env.Log.Info("watching manifest path", "path", c.ManifestDir, "relist", c.FileCheckFrequency)
	}
	if c.ManifestURL != "" {
		h := &sources.HTTP{URL: c.ManifestURL, Header: headers(c.ManifestURLHeaders), NodeName: c.NodeName,
			Period: c.HTTPCheckFrequency, Log: env.Log.With("source", podsource.HTTPSource), Report: s.state}
		run(podsource.HTTPSource, func(ctx context.Context) error { return h.Run(ctx, apply) })
		env.Log.Info("polling manifest URL", "url", c.ManifestURL, "every", c.HTTPCheckFrequency)
	}
	if s.client != nil {
		a := &sources.API{Client: s.client, NodeName: c.NodeName, Log: env.Log.With("source", podsource.APISource), Report: s.state}
		run(podsource.APISource, func(ctx context.Context) error { return a.Run(ctx, apply) })
		env.Log.Info("watching API server pods", "node", c.NodeName)
	}
	if c.ManifestDir == "" && c.ManifestURL == "" && s.client == nil {
		env.Log.Warn("no pod source configured (manifest_dir, manifest_url or kubeconfig); serving an empty pod set")
	}
	// Serving does not wait for the sources: SourcesReady says when they are.
	env.Ready()
	// Stay up until told to stop, even with no source or after one gave up:
	// an exit here would make the supervisor restart us in a loop.
	<-ctx.Done()
	wg.Wait()
	return nil
}

func headers(m map[string]string) http.Header {
	h := http.Header{}
	for k, v := range m {
		h.Set(k, v)
	}
	return h
}

// api implements PodConfigService.
type api struct {
	podconfigv1.UnimplementedPodConfigServiceServer
	s *Server
}

var _ podconfigv1.PodConfigServiceServer = (*api)(nil)

// Watch implements PodConfigService.
func (a *api) Watch(req *podconfigv1.WatchRequest, srv podconfigv1.PodConfigService_WatchServer) error {
	w := a.s.stream.Watch(req.GetResumeAfter())
	defer w.Close()
	ctx := srv.Context()
	for {
		ev, err := w.Next(ctx)
		if err != nil {
			return status.FromContextError(err).Err()
		}
		if err := srv.Send(&podconfigv1.WatchResponse{Sequence: ev.Sequence, Resync: ev.Resync, Updates: ev.Updates}); err != nil {
			return err
		}
	}
}

// ListPods implements PodConfigService.
func (a *api) ListPods(context.Context, *podconfigv1.ListPodsRequest) (*podconfigv1.ListPodsResponse, error) {
	infos, seq := a.s.stream.List()
	out := &podconfigv1.ListPodsResponse{Sequence: seq, Pods: make([]*podconfigv1.PodSummary, 0, len(infos))}
	for _, in := range infos {
		b, err := in.Pod.Marshal()
		if err != nil {
			return nil, status.Errorf(codes.Internal, "encoding pod %s/%s: %v", in.Pod.Namespace, in.Pod.Name, err)
		}
		out.Pods = append(out.Pods, &podconfigv1.PodSummary{
			Name: in.Pod.Name, Namespace: in.Pod.Namespace, Uid: string(in.Pod.UID),
			Source: in.Source, LastOp: stream.OpToProto(in.LastOp), Pod: b,
		})
	}
	return out, nil
}

// SourcesReady implements PodConfigService.
func (a *api) SourcesReady(context.Context, *podconfigv1.SourcesReadyRequest) (*podconfigv1.SourcesReadyResponse, error) {
	out := &podconfigv1.SourcesReadyResponse{AllReady: true}
	for _, name := range a.s.state.configured {
		ready := a.s.storage.Seen(name)
		out.AllReady = out.AllReady && ready
		out.Sources = append(out.Sources, &podconfigv1.SourceState{
			Name: name, Ready: ready, LastError: a.s.state.lastError(name), Pods: int32(a.s.storage.Count(name)),
		})
	}
	return out, nil
}
