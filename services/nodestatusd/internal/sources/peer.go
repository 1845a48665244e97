package sources

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/microlet/microlet/internal/grpcclient"
)

// peer is the gRPC client of another service, dialed on first use (the
// dial is lazy and reconnects by itself, so a service that is down now is
// asked again on the next reading).
type peer[C any] struct {
	name, endpoint string
	newClient      func(grpc.ClientConnInterface) C

	once   sync.Once
	err    error
	cc     *grpc.ClientConn
	client C
}

func newPeer[C any](name, endpoint string, newClient func(grpc.ClientConnInterface) C) peer[C] {
	return peer[C]{name: name, endpoint: endpoint, newClient: newClient}
}

// get returns the client, or the dial error naming the service.
func (p *peer[C]) get() (C, error) {
	p.once.Do(func() {
		p.cc, p.err = grpcclient.Dial(p.endpoint)
		if p.err == nil {
			p.client = p.newClient(p.cc)
		}
	})
	if p.err != nil {
		var zero C
		return zero, p.wrap(p.err)
	}
	return p.client, nil
}

// wrap names the service and its endpoint in err.
func (p *peer[C]) wrap(err error) error { return fmt.Errorf("%s at %s: %w", p.name, p.endpoint, err) }

// close releases the connection.
func (p *peer[C]) close() {
	if p.cc != nil {
		_ = p.cc.Close()
	}
}

// cachedPeer is what every peer source shares: the peer's client, dialed on
// first use, and its latest reading S, reused while younger than maxAge.
// A source supplies read (one reading, given the client and a context
// bounded by CallTimeout) and fail (the reading that reports an error).
type cachedPeer[C, S any] struct {
	peer  peer[C]
	cache ttlCache[S]
	read  func(ctx context.Context, client C) S
	fail  func(error) S
}

func newCachedPeer[C, S any](name, endpoint string, newClient func(grpc.ClientConnInterface) C, maxAge time.Duration,
	read func(context.Context, C) S, fail func(error) S) cachedPeer[C, S] {
	return cachedPeer[C, S]{peer: newPeer(name, endpoint, newClient), cache: ttlCache[S]{maxAge: maxAge, now: time.Now},
		read: read, fail: fail}
}

// Get returns a reading no older than maxAge.
func (s *cachedPeer[C, S]) Get(ctx context.Context) S {
	return s.cache.get(ctx, func(ctx context.Context) S {
		client, err := s.peer.get()
		if err != nil {
			return s.fail(err)
		}
		cctx, cancel := context.WithTimeout(ctx, CallTimeout)
		defer cancel()
		return s.read(cctx, client)
	})
}

// Close releases the connection.
func (s *cachedPeer[C, S]) Close() { s.peer.close() }

// errNoPort is nodeapi answering without a port.
var errNoPort = errors.New("no port")
