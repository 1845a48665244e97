package credprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	kubeletconfigv1 "k8s.io/kubelet/config/v1"
	credv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	"sigs.k8s.io/yaml"

	"github.com/microlet/microlet/services/podsyncd/internal/pullsecrets"
)

// The API version of the plugin protocol spoken here.
const apiVersion = "credentialprovider.kubelet.k8s.io/v1"

// execTimeout bounds one plugin run.
const execTimeout = time.Minute

// Providers are the configured plugins.
type Providers struct {
	log       *slog.Logger
	providers []*provider
}

type provider struct {
	cfg  kubeletconfigv1.CredentialProvider
	path string

	mu    sync.Mutex
	cache map[string]cached
}

type cached struct {
	auth    map[string]pullsecrets.Entry
	expires time.Time
}

// Load reads a CredentialProviderConfig (YAML or JSON) and finds each
// plugin in binDir; every problem is an error naming the file and field.
func Load(configPath, binDir string, log *slog.Logger) (*Providers, error) {
	if log == nil {
		log = slog.Default()
	}
	b, err := os.ReadFile(configPath)
	if err != nil {
		return nil, fmt.Errorf("image credential provider config: %w", err)
	}
	var cfg kubeletconfigv1.CredentialProviderConfig
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return nil, fmt.Errorf("image credential provider config %s: %w", configPath, err)
	}
	if cfg.Kind != "CredentialProviderConfig" || cfg.APIVersion != "kubelet.config.k8s.io/v1" {
		return nil, fmt.Errorf("image credential provider config %s: want apiVersion kubelet.config.k8s.io/v1, kind CredentialProviderConfig; got %q, %q", configPath, cfg.APIVersion, cfg.Kind)
	}
	if len(cfg.Providers) == 0 {
		return nil, fmt.Errorf("image credential provider config %s: providers: at least one is required", configPath)
	}
	out := &Providers{log: log}
	seen := map[string]bool{}
	for i, p := range cfg.Providers {
		field := fmt.Sprintf("%s: providers[%d]", configPath, i)
		switch {
		case p.Name == "" || p.Name == "." || p.Name == ".." || strings.ContainsAny(p.Name, `/\`):
			return nil, fmt.Errorf("%s.name %q: want a file name in the plugin directory", field, p.Name)
		case seen[p.Name]:
			return nil, fmt.Errorf("%s.name %q: duplicate", field, p.Name)
		case len(p.MatchImages) == 0:
			return nil, fmt.Errorf("%s.matchImages: at least one is required", field)
		case p.DefaultCacheDuration == nil || p.DefaultCacheDuration.Duration < 0:
			return nil, fmt.Errorf("%s.defaultCacheDuration: required, not negative", field)
		case p.APIVersion != apiVersion:
			return nil, fmt.Errorf("%s.apiVersion %q: only %s is supported", field, p.APIVersion, apiVersion)
		case p.TokenAttributes != nil:
			return nil, fmt.Errorf("%s.tokenAttributes: service account tokens for plugins are not supported", field)
		}
		for j, m := range p.MatchImages {
			if m == "" || strings.Contains(m, "://") {
				return nil, fmt.Errorf("%s.matchImages[%d] %q: want host[:port][/path] with globs in the host", field, j, m)
			}
		}
		seen[p.Name] = true
		path := filepath.Join(binDir, p.Name)
		if st, err := os.Stat(path); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("%s.name %q: no executable plugin %s", field, p.Name, path)
		}
		out.providers = append(out.providers, &provider{cfg: p, path: path, cache: map[string]cached{}})
	}
	return out, nil
}

// Provide returns the credentials of every plugin matching image (registry
// location → credentials), as docker config entries for a keyring. A
// failing plugin is logged and gives none.
func (ps *Providers) Provide(ctx context.Context, image string) map[string]pullsecrets.Entry {
	out := map[string]pullsecrets.Entry{}
	if ps == nil {
		return out
	}
	repo, err := pullsecrets.Repository(image)
	if err != nil {
		return out
	}
	for _, p := range ps.providers {
		if !p.matches(repo) {
			continue
		}
		auth, err := p.provide(ctx, image, repo)
		if err != nil {
			ps.log.Warn("image credential provider failed", "provider", p.cfg.Name, "image", image, "err", err)
			continue
		}
		for k, v := range auth {
			out[k] = v
		}
	}
	return out
}

func (p *provider) matches(repo string) bool {
	for _, m := range p.cfg.MatchImages {
		if pullsecrets.Match(m, repo) {
			return true
		}
	}
	return false
}

func (p *provider) provide(ctx context.Context, image, repo string) (map[string]pullsecrets.Entry, error) {
	host, _, _ := strings.Cut(repo, "/")
	now := time.Now()
	p.mu.Lock()
	for _, key := range []string{"image:" + image, "registry:" + host, "global"} {
		if c, ok := p.cache[key]; ok {
			if now.Before(c.expires) {
				p.mu.Unlock()
				return c.auth, nil
			}
			delete(p.cache, key)
		}
	}
	p.mu.Unlock()

	resp, err := p.exec(ctx, image)
	if err != nil {
		return nil, err
	}
	auth := map[string]pullsecrets.Entry{}
	for k, a := range resp.Auth {
		auth[k] = pullsecrets.Entry{Username: a.Username, Password: a.Password}
	}
	d := p.cfg.DefaultCacheDuration.Duration
	if resp.CacheDuration != nil {
		d = resp.CacheDuration.Duration
	}
	var key string
	switch resp.CacheKeyType {
	case credv1.ImagePluginCacheKeyType:
		key = "image:" + image
	case credv1.RegistryPluginCacheKeyType:
		key = "registry:" + host
	case credv1.GlobalPluginCacheKeyType:
		key = "global"
	default:
		return nil, fmt.Errorf("response cacheKeyType %q: want Image, Registry or Global", resp.CacheKeyType)
	}
	if d > 0 {
		p.mu.Lock()
		p.cache[key] = cached{auth: auth, expires: now.Add(d)}
		p.mu.Unlock()
	}
	return auth, nil
}

func (p *provider) exec(ctx context.Context, image string) (*credv1.CredentialProviderResponse, error) {
	req, err := json.Marshal(map[string]string{"apiVersion": apiVersion, "kind": "CredentialProviderRequest", "image": image})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, execTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.path, p.cfg.Args...)
	cmd.Stdin = bytes.NewReader(req)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Env = os.Environ()
	for _, e := range p.cfg.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("run %s: %w: %s", p.path, err, strings.TrimSpace(stderr.String()))
	}
	var resp credv1.CredentialProviderResponse
	if err := json.Unmarshal(stdout.Bytes(), &resp); err != nil {
		return nil, fmt.Errorf("%s: response: %w", p.path, err)
	}
	if resp.APIVersion != apiVersion || resp.Kind != "CredentialProviderResponse" {
		return nil, fmt.Errorf("%s: response apiVersion %q kind %q: want %s CredentialProviderResponse", p.path, resp.APIVersion, resp.Kind, apiVersion)
	}
	return &resp, nil
}
