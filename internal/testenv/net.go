package testenv

import (
	"net"
	"testing"
)

// FreeLoopbackAddr is a 127.0.0.1 address whose TCP port was free a moment
// ago, for a child's listening flag (--metrics-addr) when its address must
// be known before it starts.
func FreeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// HostIP returns a global unicast IPv4 address of this machine, for test
// servers that stand in for pods: the API server refuses loopback and
// link-local addresses in EndpointSlices. When there is none it skips the
// test, or fails it when Required.
func HostIP(t testing.TB) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	RequireOrSkip(t, "no global unicast IPv4 address on this machine for a backend (the API server refuses loopback endpoints)")
	return ""
}
