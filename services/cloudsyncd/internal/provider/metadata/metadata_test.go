package metadata

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/services/cloudsyncd/internal/provider"
)

// imds emulates the IMDSv2 endpoints cloudsyncd uses.
type imds struct {
	mu      sync.Mutex
	fields  map[string]string
	tokens  map[string]bool
	n       int
	puts    int
	ttls    []string
	expireN int  // answer 401 to the next expireN GETs (tokens revoked early)
	slow    bool // hang every GET until the client gives up
}

func newIMDS() *imds {
	return &imds{tokens: map[string]bool{}, fields: map[string]string{
		"instance-id":                 "i-0abc",
		"instance-type":               "m5.large",
		"placement/availability-zone": "eu-west-1a",
		"placement/region":            "eu-west-1",
		"local-ipv4":                  "10.0.0.7",
		"local-hostname":              "ip-10-0-0-7.internal",
	}}
}

func (s *imds) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.URL.Path == tokenPath {
		if r.Method != http.MethodPut || r.Header.Get(headerTTL) == "" {
			http.Error(w, "bad token request", http.StatusBadRequest)
			return
		}
		s.puts++
		s.ttls = append(s.ttls, r.Header.Get(headerTTL))
		s.n++
		tok := fmt.Sprintf("tok-%d", s.n)
		s.tokens[tok] = true
		fmt.Fprint(w, tok)
		return
	}
	if s.slow {
		s.mu.Unlock()
		<-r.Context().Done()
		s.mu.Lock()
		return
	}
	if !s.tokens[r.Header.Get(headerToken)] {
		http.Error(w, "", http.StatusUnauthorized)
		return
	}
	if s.expireN > 0 {
		s.expireN--
		s.tokens = map[string]bool{} // every token so far has expired
		http.Error(w, "", http.StatusUnauthorized)
		return
	}
	v, ok := s.fields[strings.TrimPrefix(r.URL.Path, metaPath)]
	if !ok {
		http.NotFound(w, r)
		return
	}
	fmt.Fprint(w, v)
}

func (s *imds) set(f func(*imds)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *imds) putCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.puts
}

func setup(t *testing.T, opts ...Option) (*imds, *Provider) {
	t.Helper()
	em := newIMDS()
	srv := httptest.NewServer(em)
	t.Cleanup(srv.Close)
	p, err := New(srv.URL, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return em, p
}

func TestMetadataFields(t *testing.T) {
	em, p := setup(t, WithTokenTTL(time.Minute))
	ctx := context.Background()
	addrs, err := p.NodeAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// public-ipv4 is 404 here: it is left out, not an error.
	want := []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "10.0.0.7"},
		{Type: corev1.NodeInternalDNS, Address: "ip-10-0-0-7.internal"},
		{Type: corev1.NodeHostName, Address: "ip-10-0-0-7.internal"},
	}
	if !provider.EqualAddresses(addrs, want) {
		t.Fatalf("addresses %v, want %v", addrs, want)
	}
	em.set(func(s *imds) { s.fields["public-ipv4"] = "34.1.2.3"; delete(s.fields, "placement/region") })
	md, err := p.InstanceMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if md.ProviderID != "aws:///eu-west-1a/i-0abc" || md.InstanceType != "m5.large" || md.Zone != "eu-west-1a" || md.Region != "" {
		t.Fatalf("metadata %+v", md)
	}
	if md.Addresses[1] != (corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "34.1.2.3"}) {
		t.Fatalf("external IP missing: %v", md.Addresses)
	}
	if n := em.putCount(); n != 1 {
		t.Fatalf("%d token requests, want 1 reused token", n)
	}
	if em.ttls[0] != "60" {
		t.Fatalf("TTL header %q, want 60", em.ttls[0])
	}
	if down, err := p.InstanceShutdown(ctx); down || err != nil {
		t.Fatalf("shutdown %v %v", down, err)
	}
}

func TestTokenRenewedBeforeExpiry(t *testing.T) {
	fc := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	em, p := setup(t, WithTokenTTL(100*time.Second), WithClock(fc))
	ctx := context.Background()
	if _, err := p.NodeAddresses(ctx); err != nil {
		t.Fatal(err)
	}
	fc.SetTime(time.Unix(79, 0))
	if _, err := p.NodeAddresses(ctx); err != nil {
		t.Fatal(err)
	}
	if n := em.putCount(); n != 1 {
		t.Fatalf("%d token requests before 80%% of the TTL, want 1", n)
	}
	fc.SetTime(time.Unix(81, 0))
	if _, err := p.NodeAddresses(ctx); err != nil {
		t.Fatal(err)
	}
	if n := em.putCount(); n != 2 {
		t.Fatalf("%d token requests after 80%% of the TTL, want 2", n)
	}
}

func TestExpiredTokenRetriedOnce(t *testing.T) {
	em, p := setup(t)
	ctx := context.Background()
	if _, err := p.NodeAddresses(ctx); err != nil {
		t.Fatal(err)
	}
	em.set(func(s *imds) { s.expireN = 1 })
	addrs, err := p.NodeAddresses(ctx)
	if err != nil || len(addrs) != 3 {
		t.Fatalf("after an early expiry: %v %v", addrs, err)
	}
	if n := em.putCount(); n != 2 {
		t.Fatalf("%d token requests, want 2", n)
	}
	// A service that refuses even fresh tokens fails after one retry.
	em.set(func(s *imds) { s.expireN = 100 })
	_, err = p.NodeAddresses(ctx)
	if err == nil || !strings.Contains(err.Error(), "401 even with a new token") {
		t.Fatalf("got %v, want a clear 401 error", err)
	}
	if n := em.putCount(); n != 3 {
		t.Fatalf("%d token requests, want exactly one more (no loop)", n)
	}
}

func TestSlowEndpointTimesOut(t *testing.T) {
	em, p := setup(t, WithRequestTimeout(100*time.Millisecond))
	em.set(func(s *imds) { s.slow = true })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := p.NodeAddresses(ctx)
	if err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Fatalf("got %v, want the per-request timeout", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the caller's context ran out: the per-request timeout did not apply")
	}
}

func TestBadSettings(t *testing.T) {
	for _, tc := range []struct {
		ep   string
		opts []Option
		want string
	}{
		{"169.254.169.254", nil, "metadata_endpoint"},
		{"ftp://x", nil, "metadata_endpoint"},
		{"http://x", []Option{WithTokenTTL(7 * time.Hour)}, "metadata_token_ttl"},
		{"http://x", []Option{WithRequestTimeout(0)}, "metadata_request_timeout"},
	} {
		if _, err := New(tc.ep, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q) = %v, want an error naming %s", tc.ep, err, tc.want)
		}
	}
}
