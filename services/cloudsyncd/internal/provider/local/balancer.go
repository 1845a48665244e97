package local

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// portKey identifies a listener of a balancer.
type portKey struct {
	proto corev1.Protocol
	port  int32
}

// balancer is one Service's address and listeners. Its fields are guarded
// by the provider's mutex.
type balancer struct {
	p               *Provider
	uid             types.UID
	namespace, name string
	addr            netip.Addr
	listeners       map[portKey]*listener
}

func (b *balancer) key() string { return b.namespace + "/" + b.name }

func (b *balancer) status() *corev1.LoadBalancerStatus {
	mode := corev1.LoadBalancerIPModeProxy
	return &corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: b.addr.String(), IPMode: &mode}}}
}

// sync opens the listeners of want that are missing and closes the others.
// A port that cannot be opened is an error naming it; the ports opened
// before stay, so a retry only has the failed ones left to do.
func (b *balancer) sync(want map[portKey]string) error {
	for k, l := range b.listeners {
		if _, ok := want[k]; !ok {
			l.close()
			delete(b.listeners, k)
			b.p.log.Info("local load balancer: port closed", "service", b.key(), "address", b.addr, "protocol", k.proto, "port", k.port)
		}
	}
	var errs []error
	for k, portName := range want {
		if l, ok := b.listeners[k]; ok {
			l.portName.Store(&portName)
			continue
		}
		l, err := b.open(k, portName)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		b.listeners[k] = l
		b.p.log.Info("local load balancer: port open", "service", b.key(), "address", b.addr, "protocol", k.proto, "port", k.port)
	}
	return errors.Join(errs...)
}

func (b *balancer) closeAll() {
	for k, l := range b.listeners {
		l.close()
		delete(b.listeners, k)
	}
}

func (b *balancer) open(k portKey, portName string) (*listener, error) {
	l := &listener{p: b.p, namespace: b.namespace, service: b.name, proto: k.proto, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	l.portName.Store(&portName)
	hostport := net.JoinHostPort(b.addr.String(), strconv.Itoa(int(k.port)))
	switch k.proto {
	case corev1.ProtocolTCP:
		ln, err := net.Listen("tcp", hostport)
		if err != nil {
			return nil, fmt.Errorf("listen tcp %s: %w", hostport, err)
		}
		l.tcp = ln
		go l.serveTCP()
	case corev1.ProtocolUDP:
		pc, err := net.ListenPacket("udp", hostport)
		if err != nil {
			return nil, fmt.Errorf("listen udp %s: %w", hostport, err)
		}
		l.udp = pc
		go l.serveUDP()
	}
	return l, nil
}

// listener forwards one port of a balancer.
type listener struct {
	p                  *Provider
	namespace, service string
	proto              corev1.Protocol
	portName           atomic.Pointer[string]
	next               atomic.Uint64

	tcp net.Listener
	udp net.PacketConn

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{} // TCP connections and UDP sessions' backend sockets
	done   chan struct{}
}

// track registers c so close can end it; false when the listener is closed.
func (l *listener) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.conns[c] = struct{}{}
	return true
}

func (l *listener) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
}

// close stops accepting and ends every connection of the listener.
func (l *listener) close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	close(l.done)
	if l.tcp != nil {
		_ = l.tcp.Close()
	}
	if l.udp != nil {
		_ = l.udp.Close()
	}
	for c := range conns {
		_ = c.Close()
	}
}

// backends returns the ready endpoints of the listener's Service port, in
// a stable order so round-robin is fair.
func (l *listener) backends() ([]string, error) {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: l.service})
	list, err := l.p.slices.EndpointSlices(l.namespace).List(sel)
	if err != nil {
		return nil, err
	}
	portName := *l.portName.Load()
	var out []string
	for _, s := range list {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		var port int32
		for _, sp := range s.Ports {
			proto := corev1.ProtocolTCP
			if sp.Protocol != nil {
				proto = *sp.Protocol
			}
			name := ""
			if sp.Name != nil {
				name = *sp.Name
			}
			if name == portName && proto == l.proto && sp.Port != nil {
				port = *sp.Port
				break
			}
		}
		if port == 0 {
			continue
		}
		for _, ep := range s.Endpoints {
			// A nil Ready means ready, as the API documents.
			if ep.Conditions.Ready != nil && !*ep.Conditions.Ready {
				continue
			}
			for _, a := range ep.Addresses {
				out = append(out, net.JoinHostPort(a, strconv.Itoa(int(port))))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// pick returns the backends in the order to try them: round-robin start,
// then the others, so one dead endpoint does not fail a connection.
func (l *listener) pick() ([]string, error) {
	bs, err := l.backends()
	if err != nil {
		return nil, err
	}
	if len(bs) == 0 {
		return nil, fmt.Errorf("%s/%s: no ready endpoint for port %q/%s", l.namespace, l.service, *l.portName.Load(), l.proto)
	}
	start := int(l.next.Add(1)-1) % len(bs)
	return append(bs[start:len(bs):len(bs)], bs[:start]...), nil
}
