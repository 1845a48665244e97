package simulate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/microlet/microlet/internal/config"
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/services/nodestatusd/internal/server"
)

// Config is nodestatussim's configuration: nodestatusd's (its node_name
// unused) and the simulation's own settings.
type Config struct {
	server.Config `yaml:",inline"`

	Nodes     int    `yaml:"nodes" flag:"nodes" usage:"how many nodes <prefix>-0..N-1 to keep (needs a kubeconfig whose credential is not a node's)"`
	Prefix    string `yaml:"prefix" flag:"prefix" usage:"name prefix of the simulated nodes"`
	PprofAddr string `yaml:"pprof_addr" flag:"pprof-addr" usage:"host:port to serve net/http/pprof on, for profiling the simulation (off when empty)"`
}

// DefaultConfig is nodestatusd's defaults and one node named sim-0.
func DefaultConfig() Config {
	return Config{Config: server.DefaultConfig(), Nodes: 1, Prefix: "sim"}
}

func (c *Config) validate() error {
	if err := config.Join(config.Positive(field.NewPath("nodes"), c.Nodes)); err != nil {
		return err
	}
	if errs := validation.IsDNS1123Subdomain(Name(c.Prefix, c.Nodes-1)); len(errs) > 0 {
		return fmt.Errorf("prefix %q: %s", c.Prefix, strings.Join(errs, "; "))
	}
	if c.Kubeconfig == "" {
		return errors.New("kubeconfig: required (simulated nodes exist only in an API server)")
	}
	return nil
}

// Service is nodestatussim: nodestatusd's server keeping the simulated
// nodes, and a pprof listener for profiling it.
type Service struct {
	cfg Config
	*server.Server
}

var _ service.Service = (*Service)(nil)

// New returns the service with its defaults.
func New() *Service {
	s := &Service{cfg: DefaultConfig()}
	s.Server = server.NewFor(&s.cfg.Config, nodes{&s.cfg})
	return s
}

// Config implements service.Service: nodestatusd's settings and the
// simulation's.
func (s *Service) Config() service.CommonConfig { return &s.cfg }

// Run implements service.Service.
func (s *Service) Run(ctx context.Context, env *service.Env) error {
	if s.cfg.PprofAddr != "" {
		mux := http.NewServeMux()
		service.HandlePprof(mux)
		srv, err := service.ServeHTTP("pprof_addr", s.cfg.PprofAddr, mux, env.Log)
		if err != nil {
			return err
		}
		defer func() { _ = srv.Close() }()
	}
	env.Log.Info("simulating nodes", "count", s.cfg.Nodes, "prefix", s.cfg.Prefix)
	return s.Server.Run(ctx, env)
}
