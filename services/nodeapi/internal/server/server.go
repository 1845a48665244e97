package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/kubernetes"

	"github.com/microlet/microlet/internal/components"
	"github.com/microlet/microlet/internal/criclient"
	"github.com/microlet/microlet/internal/grpcclient"
	"github.com/microlet/microlet/internal/kubeclient"
	"github.com/microlet/microlet/internal/service"
	"github.com/microlet/microlet/internal/stats"
	nodeapiv1 "github.com/microlet/microlet/proto/microlet/nodeapi/v1"
	podconfigv1 "github.com/microlet/microlet/proto/microlet/podconfig/v1"
	podsyncv1 "github.com/microlet/microlet/proto/microlet/podsync/v1"
	statusdv1 "github.com/microlet/microlet/proto/microlet/statusd/v1"
	"github.com/microlet/microlet/services/nodeapi/internal/api"
	"github.com/microlet/microlet/services/nodeapi/internal/auth"
	"github.com/microlet/microlet/services/nodeapi/internal/logs"
	"github.com/microlet/microlet/services/nodeapi/internal/pods"
	"github.com/microlet/microlet/services/nodeapi/internal/podsyncmetrics"
	"github.com/microlet/microlet/services/nodeapi/internal/servingcert"
	"github.com/microlet/microlet/services/nodeapi/internal/streams"
)

// DefaultPort is the kubelet's --port.
const DefaultPort = 10250

// Config is nodeapi's configuration; the names follow the kubelet's
// KubeletConfiguration fields.
type Config struct {
	service.Common `yaml:",inline"`

	Address string `yaml:"address" flag:"address" usage:"IP address to serve the kubelet API on (0.0.0.0 or :: for all)"`
	Port    int    `yaml:"port" flag:"port" usage:"port of the kubelet API; 0 picks a free one (the Node advertises the port really served)"`
	// ReadOnlyPort is the kubelet's readOnlyPort: plain HTTP on Address,
	// no authentication, only the read-only paths (api.NewReadOnly).
	ReadOnlyPort      int    `yaml:"read_only_port" flag:"read-only-port" usage:"port of the kubelet's read-only API (plain HTTP, no authentication: health, pods, stats, metrics); 0 disables it"`
	TLSCertFile       string `yaml:"tls_cert_file" flag:"tls-cert-file" usage:"serving certificate (PEM); empty: a self-signed one kept in cert_dir"`
	TLSPrivateKeyFile string `yaml:"tls_private_key_file" flag:"tls-private-key-file" usage:"key of tls_cert_file"`
	// TLSMinVersion and TLSCipherSuites are the kubelet's tlsMinVersion
	// and tlsCipherSuites, with its names.
	TLSMinVersion   string   `yaml:"tls_min_version" flag:"tls-min-version" usage:"lowest TLS version accepted: VersionTLS10, VersionTLS11, VersionTLS12 or VersionTLS13 (empty: VersionTLS12)"`
	TLSCipherSuites []string `yaml:"tls_cipher_suites" flag:"tls-cipher-suites" usage:"TLS 1.2 cipher suites offered, IANA names as the kubelet's --tls-cipher-suites (empty: Go's defaults)"`
	CertDir         string   `yaml:"cert_dir" flag:"cert-dir" usage:"directory of the self-signed or rotated serving certificate (default <data-dir>/pki)"`
	// RotateServerCertificates is the kubelet's serverTLSBootstrap plus
	// RotateKubeletServerCertificate: the serving certificate comes from
	// the certificates API (kubernetes.io/kubelet-serving) and is renewed.
	RotateServerCertificates bool `yaml:"rotate_server_certificates" flag:"rotate-server-certificates" usage:"request the serving certificate from the certificates API (signer kubernetes.io/kubelet-serving, the Node's names and addresses) and renew it; needs kubeconfig; someone must approve the requests"`

	ClientCAFile          string        `yaml:"client_ca_file" flag:"client-ca-file" usage:"CA bundle that signs client certificates (x509 authentication); empty disables it"`
	AnonymousAuth         bool          `yaml:"anonymous_auth" flag:"anonymous-auth" usage:"let requests without a credential in as system:anonymous (still authorized)"`
	WebhookAuthentication bool          `yaml:"authentication_webhook" flag:"authentication-webhook" usage:"check bearer tokens with TokenReview (connected mode only)"`
	WebhookCacheTTL       time.Duration `yaml:"authentication_webhook_cache_ttl" flag:"authentication-webhook-cache-ttl" usage:"how long TokenReview answers are cached"`
	AuthorizationMode     string        `yaml:"authorization_mode" flag:"authorization-mode" usage:"Webhook (SubjectAccessReview) or AlwaysAllow; standalone always uses AlwaysAllow"`
	AuthorizedTTL         time.Duration `yaml:"authorization_webhook_cache_authorized_ttl" flag:"authorization-webhook-cache-authorized-ttl" usage:"how long an allow is cached"`
	UnauthorizedTTL       time.Duration `yaml:"authorization_webhook_cache_unauthorized_ttl" flag:"authorization-webhook-cache-unauthorized-ttl" usage:"how long a deny is cached"`

	PodsDir    string `yaml:"pods_dir" flag:"pods-dir" usage:"podsyncd's pod directories (<uid>/volumes/...), for volume stats (default <data-dir>/pods; microlet run passes podsyncd's)"`
	PodLogsDir string `yaml:"pod_logs_dir" flag:"pod-logs-dir" usage:"root of the pod log directories, for log stats (podsyncd's pod_logs_dir)"`
	RootDir    string `yaml:"root_dir" flag:"root-dir" usage:"a directory on the node's filesystem (nodefs in the stats summary; default data_dir)"`

	EnableDebuggingHandlers bool          `yaml:"enable_debugging_handlers" flag:"enable-debugging-handlers" usage:"serve exec, attach, port-forward, run, containerLogs, runningpods and configz"`
	RuntimeRequestTimeout   time.Duration `yaml:"runtime_request_timeout" flag:"runtime-request-timeout" usage:"timeout of one CRI call"`
	// ConfigzFile is the node's effective KubeletConfiguration (JSON), which
	// `microlet run --config kubelet-config.yaml` writes: /configz serves it
	// instead of the fields of this service's own configuration.
	ConfigzFile string `yaml:"configz_file" flag:"configz-file" usage:"JSON KubeletConfiguration that /configz serves (written by microlet run from a KubeletConfiguration file)"`
}

// DefaultConfig is the kubelet's defaults.
func DefaultConfig() Config {
	return Config{
		Common:                  service.DefaultCommon(),
		Address:                 "0.0.0.0",
		Port:                    DefaultPort,
		WebhookAuthentication:   true,
		WebhookCacheTTL:         2 * time.Minute,
		AuthorizationMode:       auth.ModeWebhook,
		AuthorizedTTL:           5 * time.Minute,
		UnauthorizedTTL:         30 * time.Second,
		EnableDebuggingHandlers: true,
		RuntimeRequestTimeout:   2 * time.Minute,
		PodLogsDir:              stats.DefaultPodLogsDir,
	}
}

// Server is the nodeapi service.
type Server struct {
	nodeapiv1.UnimplementedNodeAPIServiceServer
	cfg Config

	// tlsPolicy is the parsed tls_min_version and tls_cipher_suites,
	// set in Register.
	tlsPolicy servingcert.Policy

	mu    sync.Mutex
	info  *nodeapiv1.GetServingInfoResponse
	certs *servingcert.Source
}

var _ nodeapiv1.NodeAPIServiceServer = (*Server)(nil)

// New returns the service with the kubelet's defaults.
func New() *Server { return &Server{cfg: DefaultConfig()} }

// Name implements service.Service.
func (s *Server) Name() string { return components.NodeAPI }

// Config implements service.Service.
func (s *Server) Config() service.CommonConfig { return &s.cfg }

// Register implements service.Service.
func (s *Server) Register(env *service.Env) error {
	c := &s.cfg
	if net.ParseIP(c.Address) == nil {
		return fmt.Errorf("address %q is not an IP address", c.Address)
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("port %d is out of range 0-65535", c.Port)
	}
	if c.ReadOnlyPort < 0 || c.ReadOnlyPort > 65535 {
		return fmt.Errorf("read_only_port %d is out of range 0-65535 (0 disables it)", c.ReadOnlyPort)
	}
	if (c.TLSCertFile == "") != (c.TLSPrivateKeyFile == "") {
		return errors.New("tls_cert_file and tls_private_key_file go together: set both or neither")
	}
	policy, warnings, err := servingcert.ParsePolicy(c.TLSMinVersion, c.TLSCipherSuites)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		env.Log.Warn(w)
	}
	s.tlsPolicy = policy
	if c.CertDir == "" {
		c.CertDir = filepath.Join(c.DataDir, "pki")
	}
	if c.RotateServerCertificates {
		switch {
		case c.TLSCertFile != "":
			return errors.New("rotate_server_certificates and tls_cert_file exclude each other: the rotated certificate replaces the file")
		case c.Kubeconfig == "":
			return errors.New("rotate_server_certificates needs kubeconfig: the certificate is requested from the API server")
		}
	}
	if c.PodsDir == "" {
		c.PodsDir = filepath.Join(c.DataDir, "pods")
	}
	if c.RootDir == "" {
		c.RootDir = c.DataDir
	}
	switch c.AuthorizationMode {
	case auth.ModeWebhook, auth.ModeAlwaysAllow:
	default:
		return fmt.Errorf("authorization_mode %q: want %s or %s", c.AuthorizationMode, auth.ModeWebhook, auth.ModeAlwaysAllow)
	}
	if err := c.checkOpenAuthorization(); err != nil {
		return err
	}
	for name, d := range map[string]time.Duration{
		"authentication_webhook_cache_ttl": c.WebhookCacheTTL, "authorization_webhook_cache_authorized_ttl": c.AuthorizedTTL,
		"authorization_webhook_cache_unauthorized_ttl": c.UnauthorizedTTL,
	} {
		if d < 0 {
			return fmt.Errorf("%s must not be negative, got %s", name, d)
		}
	}
	if c.RuntimeRequestTimeout <= 0 {
		return fmt.Errorf("runtime_request_timeout must be positive, got %s", c.RuntimeRequestTimeout)
	}
	nodeapiv1.RegisterNodeAPIServiceServer(env.Server.GRPC(), s)
	return nil
}

// checkOpenAuthorization refuses settings that would let anyone who can
// reach the address do anything (exec included): AlwaysAllow, asked for or
// the standalone stand-in for Webhook (no API server to ask), while
// someone can authenticate without an API server (a client CA, or
// anonymous requests), on an address other than loopback. The kubelet
// refuses Webhook authorization without an API server outright; microlet
// keeps the standalone node's API usable on loopback, where only the node
// itself reaches it.
func (c *Config) checkOpenAuthorization() error {
	if ip := net.ParseIP(c.Address); ip != nil && ip.IsLoopback() {
		return nil
	}
	switch {
	case c.AuthorizationMode == auth.ModeAlwaysAllow && c.AnonymousAuth:
		return fmt.Errorf("authorization_mode AlwaysAllow with anonymous_auth on address %s lets anyone run commands in every pod: use Webhook, turn anonymous_auth off, or listen on a loopback address", c.Address)
	case c.AuthorizationMode == auth.ModeWebhook && c.Kubeconfig == "" && (c.ClientCAFile != "" || c.AnonymousAuth):
		return fmt.Errorf("authorization_mode Webhook needs kubeconfig (an API server to ask); without one every client that authenticates (client_ca_file %q, anonymous_auth %v) would be allowed everything on address %s: set kubeconfig, or listen on a loopback address", c.ClientCAFile, c.AnonymousAuth, c.Address)
	}
	return nil
}

// GetServingInfo implements NodeAPIServiceServer.
func (s *Server) GetServingInfo(context.Context, *nodeapiv1.GetServingInfoRequest) (*nodeapiv1.GetServingInfoResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.info == nil {
		return nil, status.Error(codes.Unavailable, "the kubelet API is not listening yet")
	}
	return &nodeapiv1.GetServingInfoResponse{
		Address: s.info.Address, Port: s.info.Port,
		CertificatePem: s.certs.CertificatePEM(), SelfSigned: s.certs.SelfSignedCert(),
	}, nil
}

// Run implements service.Service.
func (s *Server) Run(ctx context.Context, env *service.Env) error {
	c := &s.cfg

	var client kubernetes.Interface
	if c.Kubeconfig != "" {
		cs, _, err := kubeclient.Clientset(c.Kubeconfig, "nodeapi", 20, 40)
		if err != nil {
			return err
		}
		client = cs
	}
	authCfg := auth.Config{
		NodeName: c.NodeName, ClientCAFile: c.ClientCAFile, Anonymous: c.AnonymousAuth,
		Webhook: c.WebhookAuthentication && client != nil, WebhookCacheTTL: c.WebhookCacheTTL,
		Mode: c.AuthorizationMode, AuthorizedTTL: c.AuthorizedTTL, UnauthorizedTTL: c.UnauthorizedTTL, Log: env.Log,
	}
	if client == nil && authCfg.Mode == auth.ModeWebhook {
		// Standalone: nobody to ask. Only clients that authenticate with
		// a certificate from client_ca_file (or anonymous, when enabled)
		// get in at all.
		env.Log.Info("standalone: authorization is AlwaysAllow for authenticated clients", "client_ca_file", c.ClientCAFile, "anonymous_auth", c.AnonymousAuth)
		authCfg.Mode = auth.ModeAlwaysAllow
	}
	a, err := auth.New(authCfg, client)
	if err != nil {
		return err
	}
	go a.Run(ctx)

	certs, err := s.servingCert(ctx, client, env.Log)
	if err != nil {
		return err
	}
	go certs.Run(ctx)

	// The CRI may not answer yet (runtime-shim restarting): Connect warns
	// and retries until it does.
	cri, err := criclient.Connect(ctx, c.Endpoint(components.RuntimeShim), c.ImageServiceEndpoint(), c.RuntimeRequestTimeout, env.Log)
	if err != nil {
		return err
	}
	defer cri.Close()
	rt, img := cri.Runtime, cri.Images
	statsProvider := stats.New(rt, img, stats.WithNodeName(c.NodeName), stats.WithRootDir(c.RootDir),
		stats.WithPodsDir(c.PodsDir), stats.WithPodLogsDir(c.PodLogsDir), stats.WithLogger(env.Log))

	pcConn, err := grpcclient.Dial(c.Endpoint(components.PodConfig))
	if err != nil {
		return fmt.Errorf("podconfig endpoint: %w", err)
	}
	defer pcConn.Close()
	sdConn, err := grpcclient.Dial(c.Endpoint(components.Statusd))
	if err != nil {
		return fmt.Errorf("statusd endpoint: %w", err)
	}
	defer sdConn.Close()
	psConn, err := grpcclient.Dial(c.Endpoint(components.PodSyncd))
	if err != nil {
		return fmt.Errorf("podsyncd endpoint: %w", err)
	}
	defer psConn.Close()
	src := pods.NewSource(podconfigv1.NewPodConfigServiceClient(pcConn), statusdv1.NewStatusServiceClient(sdConn))
	// The kubelet's own metrics live in podsyncd: fetched at scrape time.
	podsync := podsyncv1.NewPodSyncServiceClient(psConn)
	fetchErrs := podsyncmetrics.NewErrors(env.Registry)
	kubeletMetrics := podsyncmetrics.New(podsync, podsyncv1.MetricsSet_METRICS_SET_KUBELET,
		podsyncmetrics.WithErrors(fetchErrs), podsyncmetrics.WithLogger(env.Log))
	probeMetrics := podsyncmetrics.New(podsync, podsyncv1.MetricsSet_METRICS_SET_PROBES,
		podsyncmetrics.WithErrors(fetchErrs), podsyncmetrics.WithLogger(env.Log))

	deps := api.Deps{
		Pods:            src,
		Runtime:         rt,
		Streams:         streams.New(src, rt, streams.WithLogger(env.Log)),
		ContainerLogs:   logs.NewHandler(src, rt, logs.WithLogger(env.Log)),
		Summary:         stats.SummaryHandler(statsProvider),
		ResourceMetrics: stats.ResourceMetricsHandler(statsProvider),
		CadvisorMetrics: stats.CadvisorMetricsHandler(statsProvider),
		Metrics:         metricsHandler(env, env.Registry, kubeletMetrics),
		ProbeMetrics:    metricsHandler(env, probeMetrics),
		Checks: []healthz.HealthChecker{healthz.NamedCheck("syncloop", func(r *http.Request) error {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			return grpcclient.WaitServing(ctx, psConn, "")
		})},
		Configz:           s.configz,
		Auth:              a.Filter,
		DebuggingHandlers: c.EnableDebuggingHandlers,
		Registerer:        env.Registry,
		Log:               env.Log,
	}
	handler := api.New(deps)

	// The read-only port first: a port already taken stops the service
	// before the Node is told the API serves.
	var readOnly *http.Server
	roErr := make(chan error, 1)
	if c.ReadOnlyPort > 0 {
		roLis, err := net.Listen("tcp", net.JoinHostPort(c.Address, strconv.Itoa(c.ReadOnlyPort)))
		if err != nil {
			return fmt.Errorf("kubelet read-only API on %s:%d: %w", c.Address, c.ReadOnlyPort, err)
		}
		readOnly = httpServer(api.NewReadOnly(deps), env.Log)
		go func() { roErr <- readOnly.Serve(roLis) }()
		env.Log.Warn("serving the kubelet's read-only API without authentication (pods, stats, metrics)",
			"address", c.Address, "read_only_port", c.ReadOnlyPort)
	}

	lis, err := net.Listen("tcp", net.JoinHostPort(c.Address, strconv.Itoa(c.Port)))
	if err != nil {
		return fmt.Errorf("kubelet API on %s:%d: %w", c.Address, c.Port, err)
	}
	srv := httpServer(handler, env.Log)
	srv.TLSConfig = certs.TLSConfig(a.ClientCA(), s.tlsPolicy)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.ServeTLS(lis, "", "") }()
	port := lis.Addr().(*net.TCPAddr).Port
	s.mu.Lock()
	s.info = &nodeapiv1.GetServingInfoResponse{Address: c.Address, Port: int32(port)}
	s.mu.Unlock()
	env.Log.Info("serving the kubelet API", "address", c.Address, "port", port, "self_signed", certs.SelfSignedCert(),
		"client_ca_file", c.ClientCAFile, "authorization_mode", authCfg.Mode, "token_webhook", authCfg.Webhook)
	env.Ready()

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		runErr = fmt.Errorf("kubelet API server: %w", err)
	case err := <-roErr:
		runErr = fmt.Errorf("kubelet read-only API server: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), c.ShutdownTimeout)
	defer cancel()
	for _, hs := range []*http.Server{srv, readOnly} {
		if hs == nil {
			continue
		}
		if err := hs.Shutdown(sctx); err != nil {
			// Streams and log follows do not end on their own.
			_ = hs.Close()
		}
	}
	return runErr
}

// httpServer is a server of h with the kubelet's limits, long enough for
// exec sessions and log follows.
func httpServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       90 * time.Second,
		ReadTimeout:       4 * time.Hour,
		WriteTimeout:      4 * time.Hour,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// metricsHandler serves gs in the Prometheus formats; a family that cannot
// be gathered is logged and left out rather than failing the scrape.
func metricsHandler(env *service.Env, gs ...prometheus.Gatherer) http.Handler {
	return promhttp.HandlerFor(prometheus.Gatherers(gs), promhttp.HandlerOpts{
		Registry: env.Registry, ErrorHandling: promhttp.ContinueOnError,
		ErrorLog: slog.NewLogLogger(env.Log.Handler(), slog.LevelWarn),
	})
}

func (s *Server) servingCert(ctx context.Context, client kubernetes.Interface, log *slog.Logger) (*servingcert.Source, error) {
	c := &s.cfg
	var (
		src *servingcert.Source
		err error
	)
	if c.RotateServerCertificates {
		if err := os.MkdirAll(c.CertDir, 0o700); err != nil {
			return nil, fmt.Errorf("cert_dir: %w", err)
		}
		src, err = servingcert.Rotating(ctx, c.CertDir, c.NodeName, client, log)
	} else if c.TLSCertFile != "" {
		src, err = servingcert.FromFiles(c.TLSCertFile, c.TLSPrivateKeyFile)
	} else {
		src, err = servingcert.SelfSigned(c.CertDir, c.NodeName, nil, nil)
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.certs = src
	s.mu.Unlock()
	return src, nil
}
