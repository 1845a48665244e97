package auth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
)

// Authorization modes, as the kubelet's authorization.mode.
const (
	ModeWebhook     = "Webhook"
	ModeAlwaysAllow = "AlwaysAllow"
)

// Config is the kubelet's authentication and authorization configuration.
type Config struct {
	// NodeName is the node object requests are authorized against.
	NodeName string
	// ClientCAFile enables x509 client-certificate authentication with
	// this CA bundle; empty disables it.
	ClientCAFile string
	// Anonymous lets requests without a credential through as
	// system:anonymous (still subject to authorization).
	Anonymous bool
	// Webhook enables bearer-token authentication through TokenReview.
	Webhook bool
	// WebhookCacheTTL caches TokenReview answers (the kubelet's 2m).
	WebhookCacheTTL time.Duration
	// Mode is ModeWebhook (SubjectAccessReview) or ModeAlwaysAllow.
	Mode string
	// AuthorizedTTL and UnauthorizedTTL cache SubjectAccessReview answers
	// (the kubelet's 5m and 30s).
	AuthorizedTTL, UnauthorizedTTL time.Duration
	// Log receives authentication and authorization errors.
	Log *slog.Logger
}

// Auth authenticates and authorizes kubelet API requests.
type Auth struct {
	authn  authenticator.Request
	authz  authorizer.Authorizer
	attrs  AttributesGetter
	caFile *dynamiccertificates.DynamicFileCAContent
	log    *slog.Logger
}

// New builds the authenticator and authorizer. client may be nil
// (standalone); then neither the token webhook nor Webhook authorization
// can be used and asking for them is an error.
func New(cfg Config, client kubernetes.Interface) (*Auth, error) {
	a := &Auth{attrs: AttributesGetter{NodeName: cfg.NodeName}, log: cfg.Log}
	if a.log == nil {
		a.log = slog.Default()
	}
	authnCfg := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous: &apiserver.AnonymousAuthConfig{Enabled: cfg.Anonymous},
		CacheTTL:  cfg.WebhookCacheTTL,
	}
	if cfg.ClientCAFile != "" {
		ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client_ca_file: %w", err)
		}
		a.caFile = ca
		authnCfg.ClientCertificateCAContentProvider = ca
	}
	if cfg.Webhook {
		if client == nil {
			return nil, errors.New("webhook authentication needs an API server (set kubeconfig, or turn authentication_webhook off)")
		}
		authnCfg.TokenAccessReviewClient = client.AuthenticationV1()
		authnCfg.WebhookRetryBackoff = webhookRetryBackoff()
	}
	var err error
	if !cfg.Anonymous && cfg.ClientCAFile == "" && !cfg.Webhook {
		// k8s.io/apiserver refuses to build an authenticator without a
		// method; a standalone node with nothing configured still serves,
		// to nobody, rather than crash-looping.
		a.log.Warn("no authentication method configured: every request gets 401 (set client_ca_file, or anonymous_auth with care)")
		a.authn = nobody{}
	} else if a.authn, _, err = authnCfg.New(); err != nil {
		return nil, fmt.Errorf("authenticator: %w", err)
	}
	switch cfg.Mode {
	case ModeAlwaysAllow:
		a.authz = authorizerfactory.NewAlwaysAllowAuthorizer()
	case ModeWebhook:
		if client == nil {
			return nil, errors.New("authorization_mode Webhook needs an API server (set kubeconfig, or use AlwaysAllow)")
		}
		authzCfg := authorizerfactory.DelegatingAuthorizerConfig{
			SubjectAccessReviewClient: client.AuthorizationV1(),
			AllowCacheTTL:             cfg.AuthorizedTTL,
			DenyCacheTTL:              cfg.UnauthorizedTTL,
			WebhookRetryBackoff:       webhookRetryBackoff(),
		}
		if a.authz, err = authzCfg.New(); err != nil {
			return nil, fmt.Errorf("authorizer: %w", err)
		}
	default:
		return nil, fmt.Errorf("authorization_mode %q: want %s or %s", cfg.Mode, ModeWebhook, ModeAlwaysAllow)
	}
	return a, nil
}

// ClientCA is the client CA bundle, nil when x509 authentication is off.
// The TLS server uses it to ask clients for certificates it can verify.
func (a *Auth) ClientCA() dynamiccertificates.CAContentProvider {
	if a.caFile == nil {
		return nil
	}
	return a.caFile
}

// Run reloads the client CA bundle when its file changes, until ctx ends.
func (a *Auth) Run(ctx context.Context) {
	if a.caFile != nil {
		a.caFile.Run(ctx, 1)
	}
}

// Filter returns next behind authentication and authorization, answering as
// the kubelet does: 401 "Unauthorized" without a valid credential, 403
// naming the user, verb, resource and subresources without the permission,
// 500 when the authorizer could not decide.
func (a *Auth) Filter(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		resp, ok, err := a.authn.AuthenticateRequest(r)
		if err != nil {
			a.log.Info("unable to authenticate the request", "path", r.URL.Path, "err", err)
		}
		if err != nil || !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := a.attrs.Attributes(resp.User, r)
		subresources := make([]string, 0, len(attrs))
		for _, attr := range attrs {
			subresources = append(subresources, attr.Subresource)
			decision, _, err := a.authz.Authorize(r.Context(), attr)
			if err != nil {
				a.log.Error("authorization error", "user", attr.User.GetName(), "verb", attr.Verb, "subresource", attr.Subresource, "err", err)
				http.Error(w, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=%s, subresource=%s)",
					attr.User.GetName(), attr.Verb, attr.Resource, attr.Subresource), http.StatusInternalServerError)
				return
			}
			if decision == authorizer.DecisionAllow {
				r = r.WithContext(withUser(r.Context(), resp.User))
				next.ServeHTTP(w, r)
				return
			}
		}
		a.log.Debug("forbidden", "user", resp.User.GetName(), "verb", attrs[0].Verb, "subresources", subresources, "path", r.URL.Path)
		http.Error(w, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=%s, subresource(s)=%v)",
			resp.User.GetName(), attrs[0].Verb, attrs[0].Resource, subresources), http.StatusForbidden)
	})
}

type userKey struct{}

func withUser(ctx context.Context, u user.Info) context.Context {
	return context.WithValue(ctx, userKey{}, u)
}

// UserFrom returns the authenticated user of a request that passed Filter.
func UserFrom(ctx context.Context) (user.Info, bool) {
	u, ok := ctx.Value(userKey{}).(user.Info)
	return u, ok
}

// AttributesGetter maps a kubelet API request to the authorization
// attributes on the node object, as the kubelet's node attributes getter.
type AttributesGetter struct {
	NodeName string
}

// Attributes returns the attributes to try in order; the request is allowed
// when any one is.
func (g AttributesGetter) Attributes(u user.Info, r *http.Request) []authorizer.AttributesRecord {
	p := r.URL.Path
	var subresources []string
	// Fine-grained first (GA and locked on in 1.36), falling back to proxy.
	switch {
	case isSubpath(p, "/pods"), isSubpath(p, "/runningpods"):
		subresources = append(subresources, "pods")
	case isSubpath(p, "/healthz"):
		subresources = append(subresources, "healthz")
	case isSubpath(p, "/configz"):
		subresources = append(subresources, "configz")
	}
	switch {
	case isSubpath(p, "/stats"):
		subresources = append(subresources, "stats")
	case isSubpath(p, "/metrics"):
		subresources = append(subresources, "metrics")
	case isSubpath(p, "/logs"):
		subresources = append(subresources, "log")
	case isSubpath(p, "/checkpoint"):
		subresources = append(subresources, "checkpoint")
	case isSubpath(p, "/statusz"):
		subresources = append(subresources, "statusz")
	case isSubpath(p, "/flagz"):
		subresources = append(subresources, "configz")
	default:
		subresources = append(subresources, "proxy")
	}
	out := make([]authorizer.AttributesRecord, 0, len(subresources))
	for _, s := range subresources {
		out = append(out, authorizer.AttributesRecord{
			User: u, Verb: verb(r.Method), APIVersion: "v1", Resource: "nodes", Subresource: s,
			Name: g.NodeName, ResourceRequest: true, Path: p,
		})
	}
	return out
}

func verb(method string) string {
	switch method {
	case http.MethodPost:
		return "create"
	case http.MethodGet:
		return "get"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return ""
}

// isSubpath reports whether p is base or below it.
func isSubpath(p, base string) bool {
	base = strings.TrimSuffix(base, "/")
	return p == base || strings.HasPrefix(p, base+"/")
}

// webhookRetryBackoff is how TokenReview and SubjectAccessReview calls are
// retried: the same schedule k8s.io/apiserver's options give the kubelet
// (500 ms growing by 1.5, 5 tries, 20 % jitter), without importing that
// package and the storage stack it drags in.
func webhookRetryBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// nobody authenticates no request.
type nobody struct{}

// AuthenticateRequest implements authenticator.Request.
func (nobody) AuthenticateRequest(*http.Request) (*authenticator.Response, bool, error) {
	return nil, false, nil
}
