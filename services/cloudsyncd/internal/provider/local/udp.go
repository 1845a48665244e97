package local

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// maxDatagram is the largest UDP payload.
const maxDatagram = 65535

// udpSession is one client's flow to its backend.
type udpSession struct {
	backend  net.Conn
	lastSeen atomic.Int64 // unix nanoseconds of the client's last datagram
}

func (l *listener) serveUDP() {
	var mu sync.Mutex
	sessions := map[string]*udpSession{}
	buf := make([]byte, maxDatagram)
	for {
		n, client, err := l.udp.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			l.p.log.Warn("local load balancer: UDP read failed", "service", l.namespace+"/"+l.service, "err", err)
			continue
		}
		key := client.String()
		// Two tries: a session that just ended by idleness is replaced.
		for range 2 {
			mu.Lock()
			s := sessions[key]
			mu.Unlock()
			if s == nil {
				s = l.newUDPSession(client)
				if s == nil {
					break // no backend: the datagram is dropped, as a real balancer would
				}
				mu.Lock()
				sessions[key] = s
				mu.Unlock()
				go func() {
					l.replyUDP(s, client)
					mu.Lock()
					if sessions[key] == s {
						delete(sessions, key)
					}
					mu.Unlock()
				}()
			}
			s.lastSeen.Store(time.Now().UnixNano())
			_, err := s.backend.Write(buf[:n])
			if !errors.Is(err, net.ErrClosed) {
				break
			}
			mu.Lock()
			if sessions[key] == s {
				delete(sessions, key)
			}
			mu.Unlock()
		}
	}
}

// newUDPSession connects a socket to a backend for client, or returns nil.
func (l *listener) newUDPSession(client net.Addr) *udpSession {
	backends, err := l.pick()
	if err != nil {
		l.p.log.Warn("local load balancer: datagram dropped", "client", client, "err", err)
		return nil
	}
	// A connected UDP socket only fails for local reasons, so the first
	// backend is it: there is no handshake to tell a dead one.
	c, err := net.Dial("udp", backends[0])
	if err != nil {
		l.p.log.Warn("local load balancer: datagram dropped", "client", client, "backend", backends[0], "err", err)
		return nil
	}
	if !l.track(c) {
		_ = c.Close()
		return nil
	}
	s := &udpSession{backend: c}
	s.lastSeen.Store(time.Now().UnixNano())
	return s
}

// replyUDP sends the backend's datagrams to the client until the session
// has been idle for the timeout or the listener closes.
func (l *listener) replyUDP(s *udpSession, client net.Addr) {
	defer l.untrack(s.backend)
	defer s.backend.Close()
	buf := make([]byte, maxDatagram)
	for {
		idleEnd := time.Unix(0, s.lastSeen.Load()).Add(l.p.udpIdle)
		_ = s.backend.SetReadDeadline(idleEnd)
		n, err := s.backend.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if time.Since(time.Unix(0, s.lastSeen.Load())) >= l.p.udpIdle {
					return
				}
				continue // the client spoke since the deadline was set
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// ICMP port unreachable from a backend that is not listening
			// yet; keep the session, the client may retry.
			continue
		}
		if _, err := l.udp.WriteTo(buf[:n], client); err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
		}
	}
}
