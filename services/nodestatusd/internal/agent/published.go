package agent

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// Published is the latest Node of an agent, with change notification.
type Published struct {
	mu      sync.Mutex
	node    *corev1.Node
	changed chan struct{}
}

func newPublished() *Published { return &Published{changed: make(chan struct{})} }

// Get returns the latest Node, or nil before the first one.
func (p *Published) Get() *corev1.Node {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.node
}

// Set publishes a new Node and wakes the watchers. It keeps n itself (no
// copy: with thousands of simulated nodes every copy counts), so the caller
// must not change n afterwards; readers must not change what Get returns.
func (p *Published) Set(n *corev1.Node) {
	p.mu.Lock()
	p.node = n
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// Next returns the current Node and a channel closed at the next change.
func (p *Published) Next() (*corev1.Node, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.node, p.changed
}

// Wait blocks until a Node is published or ctx ends.
func (p *Published) Wait(ctx context.Context) (*corev1.Node, error) {
	for {
		n, ch := p.Next()
		if n != nil {
			return n, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
	}
}
