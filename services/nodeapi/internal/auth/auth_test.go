package auth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// TestAttributes pins the kubelet's path → subresource mapping, with the
// fine-grained subresource first for pods, runningpods, healthz and configz.
func TestAttributes(t *testing.T) {
	g := AttributesGetter{NodeName: "n1"}
	u := &user.DefaultInfo{Name: "alice"}
	for _, tc := range []struct {
		method, path string
		verb         string
		subresources []string
	}{
		{"GET", "/pods", "get", []string{"pods", "proxy"}},
		{"GET", "/pods/", "get", []string{"pods", "proxy"}},
		{"GET", "/runningpods/", "get", []string{"pods", "proxy"}},
		{"GET", "/healthz", "get", []string{"healthz", "proxy"}},
		{"GET", "/healthz/syncloop", "get", []string{"healthz", "proxy"}},
		{"GET", "/configz", "get", []string{"configz", "proxy"}},
		{"GET", "/stats/summary", "get", []string{"stats"}},
		{"POST", "/stats/summary", "create", []string{"stats"}},
		{"GET", "/metrics", "get", []string{"metrics"}},
		{"GET", "/metrics/resource", "get", []string{"metrics"}},
		{"GET", "/logs/", "get", []string{"log"}},
		{"GET", "/containerLogs/ns/p/c", "get", []string{"proxy"}},
		{"POST", "/exec/ns/p/c", "create", []string{"proxy"}},
		{"GET", "/portForward/ns/p", "get", []string{"proxy"}},
		{"PUT", "/checkpoint/ns/p/c", "update", []string{"checkpoint"}},
		{"DELETE", "/flagz", "delete", []string{"configz"}},
		{"PATCH", "/statusz", "patch", []string{"statusz"}},
		{"GET", "/podsx", "get", []string{"proxy"}},  // not a subpath of /pods
		{"GET", "/statsx", "get", []string{"proxy"}}, // nor of /stats
		{"OPTIONS", "/pods", "", []string{"pods", "proxy"}},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		attrs := g.Attributes(u, r)
		var got []string
		for _, a := range attrs {
			got = append(got, a.Subresource)
			if a.Verb != tc.verb || a.Resource != "nodes" || a.Name != "n1" || a.APIVersion != "v1" || !a.ResourceRequest || a.Namespace != "" || a.Path != tc.path || a.User != u {
				t.Errorf("%s %s: attributes %+v", tc.method, tc.path, a)
			}
		}
		if strings.Join(got, ",") != strings.Join(tc.subresources, ",") {
			t.Errorf("%s %s: subresources %v, want %v", tc.method, tc.path, got, tc.subresources)
		}
	}
}

type fakeAuthn struct {
	u   user.Info
	ok  bool
	err error
}

func (f fakeAuthn) AuthenticateRequest(*http.Request) (*authenticator.Response, bool, error) {
	if !f.ok {
		return nil, false, f.err
	}
	return &authenticator.Response{User: f.u}, true, nil
}

// fakeAuthz allows the listed subresources and counts the questions.
type fakeAuthz struct {
	allow map[string]bool
	err   error
	asked *[]string
}

func (f fakeAuthz) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	*f.asked = append(*f.asked, a.GetSubresource())
	if f.err != nil {
		return authorizer.DecisionNoOpinion, "", f.err
	}
	if f.allow[a.GetSubresource()] {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// TestFilter checks the answers: 401, 403 naming what was asked, 500, and
// the fall-back from a fine-grained subresource to proxy.
func TestFilter(t *testing.T) {
	bob := &user.DefaultInfo{Name: "bob"}
	for _, tc := range []struct {
		name   string
		authn  fakeAuthn
		allow  map[string]bool
		authzE error
		path   string
		code   int
		body   string
		asked  string
	}{
		{"no credential", fakeAuthn{}, nil, nil, "/pods", 401, "Unauthorized", ""},
		{"authenticator error", fakeAuthn{err: errors.New("boom")}, nil, nil, "/pods", 401, "Unauthorized", ""},
		{"allowed fine-grained", fakeAuthn{u: bob, ok: true}, map[string]bool{"pods": true}, nil, "/pods", 200, "served", "pods"},
		{"allowed through proxy", fakeAuthn{u: bob, ok: true}, map[string]bool{"proxy": true}, nil, "/pods", 200, "served", "pods,proxy"},
		{"forbidden", fakeAuthn{u: bob, ok: true}, nil, nil, "/pods", 403,
			"Forbidden (user=bob, verb=get, resource=nodes, subresource(s)=[pods proxy])", "pods,proxy"},
		{"forbidden stats", fakeAuthn{u: bob, ok: true}, map[string]bool{"proxy": true}, nil, "/stats/summary", 403, "subresource(s)=[stats]", "stats"},
		{"authorizer error", fakeAuthn{u: bob, ok: true}, nil, errors.New("down"), "/pods", 500,
			"Authorization error (user=bob, verb=get, resource=nodes, subresource=pods)", "pods"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var asked []string
			a := &Auth{authn: tc.authn, authz: fakeAuthz{allow: tc.allow, err: tc.authzE, asked: &asked},
				attrs: AttributesGetter{NodeName: "n1"}, log: nil}
			a.log = testLogger()
			h := a.Filter(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if u, ok := UserFrom(r.Context()); !ok || u.GetName() != "bob" {
					t.Errorf("handler sees user %v", u)
				}
				_, _ = w.Write([]byte("served"))
			}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.body) {
				t.Errorf("%d %q, want %d with %q", rec.Code, rec.Body.String(), tc.code, tc.body)
			}
			if strings.Join(asked, ",") != tc.asked {
				t.Errorf("asked about %v, want %s", asked, tc.asked)
			}
		})
	}
}

// TestNew checks the configurations New refuses, and that a node with no
// authentication method still builds (and lets nobody in).
func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		err  string
	}{
		{"webhook without a client", Config{Webhook: true, Mode: ModeAlwaysAllow}, "webhook authentication needs an API server"},
		{"webhook authz without a client", Config{Anonymous: true, Mode: ModeWebhook}, "authorization_mode Webhook needs an API server"},
		{"unknown mode", Config{Anonymous: true, Mode: "Maybe"}, `authorization_mode "Maybe"`},
		{"missing CA file", Config{ClientCAFile: "/nonexistent/ca.crt", Mode: ModeAlwaysAllow}, "client_ca_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg, nil); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want %q", err, tc.err)
			}
		})
	}
	a, err := New(Config{Mode: ModeAlwaysAllow, Log: testLogger()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	a.Filter(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != http.StatusUnauthorized {
		t.Errorf("no method configured: %d, want 401", rec.Code)
	}
	anon, err := New(Config{Anonymous: true, Mode: ModeAlwaysAllow, Log: testLogger()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec = httptest.NewRecorder()
	anon.Filter(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := UserFrom(r.Context())
		_, _ = w.Write([]byte(u.GetName()))
	})).ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	if rec.Code != http.StatusOK || rec.Body.String() != user.Anonymous {
		t.Errorf("anonymous: %d %q", rec.Code, rec.Body.String())
	}
}
