package server

import (
	"context"

	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/service"
)

// Config is podconfig's configuration.
type Config struct {
	service.Common `yaml:",inline"`

	ManifestDir string `yaml:"manifest_dir" flag:"manifest-dir" usage:"directory of static pod manifests (empty: no file source)"`
	ManifestURL string `yaml:"manifest_url" flag:"manifest-url" usage:"URL of a static pod manifest or PodList (empty: no http source)"`
}

// Server is the podconfig service.
type Server struct {
	cfg Config
}

// New returns the service with its defaults.
func New() *Server { return &Server{cfg: Config{Common: service.DefaultCommon()}} }

// Name implements service.Service.
func (s *Server) Name() string { return components.PodConfig }

// Config implements service.Service.
func (s *Server) Config() service.CommonConfig { return &s.cfg }

// Register implements service.Service.
func (s *Server) Register(env *service.Env) error {
	podconfigv1.RegisterPodConfigServiceServer(env.Server.GRPC(), unimplemented{})
	return nil
}

// Run implements service.Service: nothing to do yet, so it is ready at once.
func (s *Server) Run(ctx context.Context, env *service.Env) error {
	env.Ready()
	<-ctx.Done()
	return nil
}
