package local

import (
	"net/netip"
	"strings"
	"testing"
)

func TestPoolErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct {
		pool []string
		want string
	}{
		{[]string{"nope"}, `local_lb_pool[0] "nope": want a CIDR or an IP address`},
		{[]string{"127.0.1.0/24", "127.0.1.9"}, `local_lb_pool[1] "127.0.1.9": overlaps local_lb_pool[0]`},
		{[]string{"127.0.1.1/24"}, "has host bits set, want 127.0.1.0/24"},
		{[]string{"10.0.0.1", "fe80::1%eth0"}, `local_lb_pool[1] "fe80::1%eth0"`},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := parsePool(tc.pool)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parsePool(%q) = %v, want an error containing %q", tc.pool, err, tc.want)
			}
		})
	}
}

func TestPoolOrder(t *testing.T) {
	p, err := parsePool([]string{"192.0.2.8/30", "198.51.100.7", "2001:db8::/127"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	p.each(func(a netip.Addr) bool { got = append(got, a.String()); return true })
	// The /30 loses its network and broadcast addresses; a single IP and an
	// IPv6 /127 are handed out whole.
	want := "192.0.2.9 192.0.2.10 198.51.100.7 2001:db8:: 2001:db8::1"
	if strings.Join(got, " ") != want {
		t.Fatalf("pool order %q, want %q", strings.Join(got, " "), want)
	}
	if def, _ := parsePool(nil); !def.contains(netip.MustParseAddr("127.0.1.200")) || def.contains(netip.MustParseAddr("127.0.2.1")) {
		t.Fatal("the default pool is 127.0.1.0/24")
	}
}
