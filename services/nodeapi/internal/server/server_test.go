package server

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microlet/microlet/internal/grpcserver"
	"github.com/microlet/microlet/internal/service"
)

// TestRegisterValidates: every bad setting stops the service with a line
// naming its key; the defaults pass and derive the directories.
func TestRegisterValidates(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		name string
		edit func(*Config)
		err  string
	}{
		{"defaults", func(*Config) {}, ""},
		{"address not an IP", func(c *Config) { c.Address = "localhost" }, `address "localhost" is not an IP address`},
		{"port too big", func(c *Config) { c.Port = 70000 }, "port 70000 is out of range"},
		{"negative port", func(c *Config) { c.Port = -1 }, "port -1 is out of range"},
		{"read-only port too big", func(c *Config) { c.ReadOnlyPort = 65536 }, "read_only_port 65536 is out of range 0-65535 (0 disables it)"},
		{"negative read-only port", func(c *Config) { c.ReadOnlyPort = -1 }, "read_only_port -1 is out of range"},
		{"read-only port", func(c *Config) { c.ReadOnlyPort = 10255 }, ""},
		{"cert without key", func(c *Config) { c.TLSCertFile = "/x.crt" }, "tls_cert_file and tls_private_key_file go together"},
		{"key without cert", func(c *Config) { c.TLSPrivateKeyFile = "/x.key" }, "tls_cert_file and tls_private_key_file go together"},
		{"unknown authorization mode", func(c *Config) { c.AuthorizationMode = "RBAC" }, `authorization_mode "RBAC"`},
		{"negative TTL", func(c *Config) { c.UnauthorizedTTL = -time.Second }, "authorization_webhook_cache_unauthorized_ttl must not be negative"},
		{"unknown TLS version", func(c *Config) { c.TLSMinVersion = "TLSv1.2" }, `tls_min_version: unknown tls version "TLSv1.2"`},
		{"unknown cipher suite", func(c *Config) { c.TLSCipherSuites = []string{"TLS_AES_NOPE"} }, "tls_cipher_suites: Cipher suite TLS_AES_NOPE not supported"},
		{"kubelet TLS names", func(c *Config) {
			c.TLSMinVersion, c.TLSCipherSuites = "VersionTLS12", []string{"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"}
		}, ""},
		{"zero runtime timeout", func(c *Config) { c.RuntimeRequestTimeout = 0 }, "runtime_request_timeout must be positive"},
		{"standalone Webhook with a client CA on every address", func(c *Config) { c.ClientCAFile = "/ca.crt" },
			"authorization_mode Webhook needs kubeconfig (an API server to ask)"},
		{"standalone Webhook with anonymous requests on an address", func(c *Config) { c.AnonymousAuth, c.Address = true, "192.0.2.7" },
			"authorization_mode Webhook needs kubeconfig (an API server to ask)"},
		{"standalone Webhook with a client CA on loopback", func(c *Config) { c.ClientCAFile, c.Address = "/ca.crt", "127.0.0.1" }, ""},
		{"standalone Webhook with nobody able to authenticate", func(*Config) {}, ""},
		{"connected Webhook with a client CA", func(c *Config) { c.ClientCAFile, c.Kubeconfig = "/ca.crt", "/node.kubeconfig" }, ""},
		{"AlwaysAllow with anonymous requests", func(c *Config) { c.AuthorizationMode, c.AnonymousAuth = "AlwaysAllow", true },
			"authorization_mode AlwaysAllow with anonymous_auth on address 0.0.0.0 lets anyone run commands"},
		{"AlwaysAllow with anonymous requests on ::1", func(c *Config) { c.AuthorizationMode, c.AnonymousAuth, c.Address = "AlwaysAllow", true, "::1" }, ""},
		{"AlwaysAllow for client certificates", func(c *Config) { c.AuthorizationMode, c.ClientCAFile = "AlwaysAllow", "/ca.crt" }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			s.cfg.DataDir = "/var/lib/microlet/nodeapi"
			tc.edit(&s.cfg)
			err := s.Register(&service.Env{Log: log, Server: grpcserver.New(log)})
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				if s.cfg.CertDir != "/var/lib/microlet/nodeapi/pki" || s.cfg.PodsDir != "/var/lib/microlet/nodeapi/pods" || s.cfg.RootDir != s.cfg.DataDir {
					t.Errorf("derived dirs %q %q %q", s.cfg.CertDir, s.cfg.PodsDir, s.cfg.RootDir)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want %q", err, tc.err)
			}
		})
	}
}

// TestConfigz: /configz speaks the kubelet's configuration type.
func TestConfigz(t *testing.T) {
	s := New()
	s.cfg.Port, s.cfg.ReadOnlyPort = 12345, 10255
	s.cfg.ClientCAFile = "/ca.crt"
	c := s.configz()
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"kind":"KubeletConfiguration"`, `"apiVersion":"kubelet.config.k8s.io/v1beta1"`, `"port":12345`, `"readOnlyPort":10255`,
		`"clientCAFile":"/ca.crt"`, `"mode":"Webhook"`, `"cacheAuthorizedTTL":"5m0s"`, `"enableDebuggingHandlers":true`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("configz lacks %s: %s", want, b)
		}
	}
}

// TestConfigzFile: with configz_file, /configz serves that file (the node's
// effective KubeletConfiguration), and says so when it cannot.
func TestConfigzFile(t *testing.T) {
	s := New()
	s.cfg.ConfigzFile = filepath.Join(t.TempDir(), "kc.json")
	want := `{"kind":"KubeletConfiguration","maxPods":42}`
	if err := os.WriteFile(s.cfg.ConfigzFile, []byte(want), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(s.configz())
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want {
		t.Errorf("configz = %s, want %s", b, want)
	}
	s.cfg.ConfigzFile += ".missing"
	if b, _ := json.Marshal(s.configz()); !strings.Contains(string(b), "configz_file") {
		t.Errorf("configz of a missing file = %s", b)
	}
}
