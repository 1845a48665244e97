package docker

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestResolvConf(t *testing.T) {
	d := &runtimeapi.DNSConfig{Servers: []string{"10.96.0.10", "fd00::a"}, Searches: []string{"a.example", "b.example"}, Options: []string{"ndots:5"}}
	want := "nameserver 10.96.0.10\nnameserver fd00::a\nsearch a.example b.example\noptions ndots:5\n"
	if got := string(resolvConf(d)); got != want {
		t.Errorf("resolvConf = %q, want %q", got, want)
	}
	if got := string(resolvConf(&runtimeapi.DNSConfig{Servers: []string{"1.1.1.1"}})); got != "nameserver 1.1.1.1\n" {
		t.Errorf("resolvConf with servers only = %q", got)
	}
}

func TestValidateDNSConfig(t *testing.T) {
	if err := validateDNSConfig(nil); err != nil {
		t.Errorf("nil config: %v", err)
	}
	for _, d := range []*runtimeapi.DNSConfig{
		{Servers: []string{"10.0.0.1 "}},
		{Searches: []string{""}},
		{Searches: []string{"a\nnameserver 1.2.3.4"}},
		{Options: []string{"ndots:5\r"}},
	} {
		if err := validateDNSConfig(d); status.Code(err) != codes.InvalidArgument {
			t.Errorf("validateDNSConfig(%v) = %v, want InvalidArgument", d, err)
		}
	}
}

func TestIsSharedResolvConf(t *testing.T) {
	const sb = "0123abcd"
	for _, c := range []struct {
		dst, src, sb string
		want         bool
	}{
		{"/etc/resolv.conf", "/var/lib/docker/containers/" + sb + "/resolv.conf", sb, true},
		{"/etc/resolv.conf", "/srv/my/resolv.conf", sb, false}, // the CRI config's own mount
		{"/etc/resolv.conf", "/var/lib/docker/containers/other/resolv.conf", sb, false},
		{"/etc/hosts", "/var/lib/docker/containers/" + sb + "/resolv.conf", sb, false},
		{"/etc/resolv.conf", "/x/resolv.conf", "", false},
	} {
		if got := isSharedResolvConf(c.dst, c.src, c.sb); got != c.want {
			t.Errorf("isSharedResolvConf(%q, %q, %q) = %v", c.dst, c.src, c.sb, got)
		}
	}
}
