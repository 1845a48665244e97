package controllers

import (
	"net"
	"slices"
	"strings"
	"testing"

	fakecloud "k8s.io/cloud-provider/fake"
)

// newFakeCloud is k8s.io/cloud-provider's test double, giving balancers
// the address 192.0.2.10.
func newFakeCloud() *fakecloud.Cloud {
	return &fakecloud.Cloud{ExternalIP: net.ParseIP("192.0.2.10"), Provider: "fake"}
}

func TestParseNames(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		want    []string
		wantErr string
	}{
		{in: nil, want: nil},
		{in: []string{"node", "service"}, want: []string{Service, Node}},
		{in: []string{"route,node-lifecycle", " service "}, want: []string{Service, NodeLifecycle, Route}},
		{in: []string{"service", "service"}, want: []string{Service}},
		{in: []string{"service", "nodes"}, wantErr: `unknown controller "nodes"`},
		{in: []string{"service,"}, wantErr: `unknown controller ""`},
		{in: []string{"cloud-node"}, wantErr: "known: service, node, node-lifecycle, route"},
	} {
		t.Run(strings.Join(tc.in, "|"), func(t *testing.T) {
			got, err := ParseNames(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v %v, want %v", got, err, tc.want)
			}
		})
	}
}

func TestParseClusterCIDRs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		fail bool
	}{
		{"10.244.0.0/16", 1, false},
		{" 10.244.0.0/16,fd00::/48", 2, false},
		{"10.244.0.0/16,10.245.0.0/16", 0, true},
		{"10.244.0.0/16,fd00::/48,10.1.0.0/16", 0, true},
		{"10.244.0.0", 0, true},
		{"", 0, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseClusterCIDRs(tc.in)
			if (err != nil) != tc.fail || len(got) != tc.n {
				t.Fatalf("got %v %v, want %d CIDRs, fail=%v", got, err, tc.n, tc.fail)
			}
		})
	}
}

func TestNewRefusesBadSettings(t *testing.T) {
	base := DefaultConfig()
	base.Controllers = []string{Service}
	for _, tc := range []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"no controllers", func(c *Config) { c.Controllers = nil }, "no controller"},
		{"route without CIDR", func(c *Config) { c.Controllers = []string{Route} }, "cluster CIDR"},
		{"lease not longer than renew", func(c *Config) { c.LeaderElection.LeaseDuration = c.LeaderElection.RenewDeadline }, "leaseDuration"},
		{"renew too close to retry", func(c *Config) { c.LeaderElection.RetryPeriod = c.LeaderElection.RenewDeadline }, "renewDeadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			tc.mutate(&cfg)
			_, err := New(cfg, nil, newFakeCloud())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}
