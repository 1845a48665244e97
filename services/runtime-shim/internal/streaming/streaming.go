package streaming

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"time"

	criserver "k8s.io/cri-streaming/pkg/streaming"
)

// Server is a running streaming server.
type Server struct {
	criserver.Server
	lis  net.Listener
	http *http.Server
	done chan struct{}
}

// Start listens on addr (host:port; port 0 picks one) and serves the
// streaming endpoints for rt. The listener is opened before any URL is
// handed out, so URLs always carry the real port.
func Start(addr string, rt criserver.Runtime, log *slog.Logger) (*Server, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("streaming server: %w", err)
	}
	cfg := criserver.DefaultConfig
	cfg.Addr = lis.Addr().String()
	cfg.BaseURL = &url.URL{Scheme: "http", Host: lis.Addr().String()}
	cs, err := criserver.NewServer(cfg, rt)
	if err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("streaming server: %w", err)
	}
	s := &Server{Server: cs, lis: lis, done: make(chan struct{}),
		http: &http.Server{Handler: cs, ReadHeaderTimeout: 30 * time.Second}}
	go func() {
		defer close(s.done)
		if err := s.http.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) && log != nil {
			log.Error("streaming server stopped", "err", err)
		}
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.lis.Addr().String() }

// Close stops the server and ends open streams.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.http.Shutdown(ctx)
	if err != nil {
		err = s.http.Close()
	}
	<-s.done
	return err
}
