package sources

import (
	"errors"
	"fmt"
	"sync"

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

// errNoPort is nodeapi answering without a port.
var errNoPort = errors.New("no port")
