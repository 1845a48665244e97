package metadata

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/clock"

	"github.com/microlet/microlet/internal/config"
	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
)

// Name is the provider's name in the config.
const Name = "metadata"

// Defaults.
const (
	DefaultEndpoint       = "http://169.254.169.254"
	DefaultTokenTTL       = 6 * time.Hour
	DefaultRequestTimeout = 2 * time.Second
	// ProviderIDScheme is the scheme of the provider IDs built from
	// instance-id, the one the AWS cloud provider uses.
	ProviderIDScheme = "aws"
)

// IMDSv2 paths and headers.
const (
	tokenPath     = "/latest/api/token"
	metaPath      = "/latest/meta-data/"
	headerTTL     = "X-aws-ec2-metadata-token-ttl-seconds"
	headerToken   = "X-aws-ec2-metadata-token"
	maxBody       = 64 << 10
	renewFraction = 0.8 // renew once 80% of the TTL has passed
	minTokenTTL   = time.Second
	maxTokenTTL   = 6 * time.Hour // the service's own limit
)

// Provider asks an IMDSv2 endpoint.
type Provider struct {
	base    *url.URL
	ttl     time.Duration
	timeout time.Duration
	clock   clock.PassiveClock
	client  *http.Client

	mu      sync.Mutex
	token   string
	renewAt time.Time
}

var _ provider.Provider = (*Provider)(nil)

// Option configures New.
type Option func(*Provider)

// WithTokenTTL sets the TTL asked for each token (1s to 6h).
func WithTokenTTL(d time.Duration) Option { return func(p *Provider) { p.ttl = d } }

// WithRequestTimeout bounds each HTTP request.
func WithRequestTimeout(d time.Duration) Option { return func(p *Provider) { p.timeout = d } }

// WithClock injects the clock that decides when the token is renewed.
func WithClock(c clock.PassiveClock) Option { return func(p *Provider) { p.clock = c } }

// WithHTTPClient replaces the HTTP client.
func WithHTTPClient(c *http.Client) Option { return func(p *Provider) { p.client = c } }

// New returns a provider for endpoint ("http://host[:port]"). Errors name the
// setting at fault so they can be reported as configuration errors.
func New(endpoint string, opts ...Option) (*Provider, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("metadata_endpoint %q: want http://host[:port]", endpoint)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	p := &Provider{
		base:    u,
		ttl:     DefaultTokenTTL,
		timeout: DefaultRequestTimeout,
		clock:   clock.RealClock{},
		// No proxy: the metadata service is link-local and a proxy would
		// answer for a different machine.
		client: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 2}},
	}
	for _, o := range opts {
		o(p)
	}
	if p.ttl < minTokenTTL || p.ttl > maxTokenTTL {
		return nil, fmt.Errorf("metadata_token_ttl %s: want between %s and %s", p.ttl, minTokenTTL, maxTokenTTL)
	}
	if err := config.Join(config.Positive(field.NewPath("metadata_request_timeout"), p.timeout)); err != nil {
		return nil, err
	}
	return p, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Close implements provider.Provider.
func (p *Provider) Close() error {
	p.client.CloseIdleConnections()
	return nil
}

// getToken returns a valid token, fetching one when there is none or the
// current one is near its end.
func (p *Provider) getToken(ctx context.Context, force bool) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !force && p.token != "" && p.clock.Now().Before(p.renewAt) {
		return p.token, nil
	}
	now := p.clock.Now()
	body, code, err := p.do(ctx, http.MethodPut, tokenPath, map[string]string{
		headerTTL: strconv.Itoa(int(p.ttl / time.Second)),
	})
	if err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	if code != http.StatusOK {
		return "", fmt.Errorf("token: HTTP %d: %s", code, short(body))
	}
	tok := strings.TrimSpace(string(body))
	if tok == "" {
		return "", errors.New("token: empty answer")
	}
	p.token = tok
	p.renewAt = now.Add(time.Duration(float64(p.ttl) * renewFraction))
	return tok, nil
}

func (p *Provider) do(ctx context.Context, method, path string, headers map[string]string) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	u := *p.base
	u.Path += path
	req, err := http.NewRequestWithContext(ctx, method, u.String(), nil)
	if err != nil {
		return nil, 0, err
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return body, resp.StatusCode, nil
}

// get reads one meta-data field. A missing field is provider.ErrNotFound.
func (p *Provider) get(ctx context.Context, field string) (string, error) {
	retried := false
	force := false
	for {
		tok, err := p.getToken(ctx, force)
		if err != nil {
			return "", err
		}
		body, code, err := p.do(ctx, http.MethodGet, metaPath+field, map[string]string{headerToken: tok})
		if err != nil {
			return "", fmt.Errorf("%s: %w", field, err)
		}
		switch code {
		case http.StatusOK:
			return strings.TrimSpace(string(body)), nil
		case http.StatusNotFound:
			return "", fmt.Errorf("%s: %w", field, provider.ErrNotFound)
		case http.StatusUnauthorized:
			// The token expired or was revoked before we expected: one
			// fresh token and one retry, never a loop.
			if retried {
				return "", fmt.Errorf("%s: HTTP 401 even with a new token", field)
			}
			retried, force = true, true
			continue
		default:
			return "", fmt.Errorf("%s: HTTP %d: %s", field, code, short(body))
		}
	}
}

// optional reads a field that may be absent, returning "" then.
func (p *Provider) optional(ctx context.Context, field string) (string, error) {
	v, err := p.get(ctx, field)
	if errors.Is(err, provider.ErrNotFound) {
		return "", nil
	}
	return v, err
}

// NodeAddresses implements provider.Provider: local-ipv4 (InternalIP),
// public-ipv4 (ExternalIP) and local-hostname (InternalDNS and Hostname).
func (p *Provider) NodeAddresses(ctx context.Context) ([]corev1.NodeAddress, error) {
	var out []corev1.NodeAddress
	for _, f := range []struct {
		field string
		types []corev1.NodeAddressType
	}{
		{"local-ipv4", []corev1.NodeAddressType{corev1.NodeInternalIP}},
		{"public-ipv4", []corev1.NodeAddressType{corev1.NodeExternalIP}},
		{"local-hostname", []corev1.NodeAddressType{corev1.NodeInternalDNS, corev1.NodeHostName}},
	} {
		v, err := p.optional(ctx, f.field)
		if err != nil {
			return nil, err
		}
		if v == "" {
			continue
		}
		for _, t := range f.types {
			out = append(out, corev1.NodeAddress{Type: t, Address: v})
		}
	}
	return out, nil
}

// InstanceMetadata implements provider.Provider.
func (p *Provider) InstanceMetadata(ctx context.Context) (*provider.Metadata, error) {
	id, err := p.get(ctx, "instance-id")
	if err != nil {
		return nil, err
	}
	md := &provider.Metadata{}
	for field, dst := range map[string]*string{
		"instance-type":               &md.InstanceType,
		"placement/availability-zone": &md.Zone,
		"placement/region":            &md.Region,
	} {
		if *dst, err = p.optional(ctx, field); err != nil {
			return nil, err
		}
	}
	md.ProviderID = fmt.Sprintf("%s:///%s/%s", ProviderIDScheme, md.Zone, id)
	if md.Addresses, err = p.NodeAddresses(ctx); err != nil {
		return nil, err
	}
	return md, nil
}

// InstanceShutdown implements provider.Provider. An instance that answers its
// own metadata service is running, so this is always false.
func (p *Provider) InstanceShutdown(context.Context) (bool, error) { return false, nil }

func short(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
