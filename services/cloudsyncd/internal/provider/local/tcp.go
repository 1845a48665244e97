package local

import (
	"errors"
	"io"
	"net"
	"time"
)

// dialTimeout bounds the connection to one backend before the next is tried.
const dialTimeout = 5 * time.Second

func (l *listener) serveTCP() {
	for {
		c, err := l.tcp.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			l.p.log.Warn("local load balancer: accept failed", "service", l.namespace+"/"+l.service, "err", err)
			select {
			case <-l.done:
				return
			case <-time.After(100 * time.Millisecond): // out of file descriptors: do not spin
			}
			continue
		}
		go l.forwardTCP(c)
	}
}

// forwardTCP connects the client to a backend and copies both ways; a
// side's end of stream is passed on as a half-close.
func (l *listener) forwardTCP(client net.Conn) {
	defer client.Close()
	if !l.track(client) {
		return
	}
	defer l.untrack(client)
	backends, err := l.pick()
	if err != nil {
		l.p.log.Warn("local load balancer: connection refused", "err", err)
		return
	}
	var backend net.Conn
	for _, b := range backends {
		backend, err = net.DialTimeout("tcp", b, dialTimeout)
		if err == nil {
			break
		}
		l.p.log.Warn("local load balancer: backend unreachable, trying the next", "service", l.namespace+"/"+l.service, "backend", b, "err", err)
	}
	if backend == nil {
		return
	}
	defer backend.Close()
	if !l.track(backend) {
		return
	}
	defer l.untrack(backend)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(backend, client)
	}()
	pipe(client, backend)
	<-done
}

// pipe copies src to dst, then half-closes dst for writing (or closes it).
func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}
