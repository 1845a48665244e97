package cloud

import (
	"context"
	"fmt"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	cloudprovider "k8s.io/cloud-provider"

	"github.com/microlet/microlet/services/cloudsyncd/internal/provider/static"
)

// staticCloud answers from a static file of the cluster form.
type staticCloud struct {
	base
	p    *static.Provider
	path string
}

func newStatic(path string, log *slog.Logger) (*staticCloud, error) {
	p, err := static.New(path, log)
	if err != nil {
		return nil, err
	}
	return &staticCloud{base: base{name: static.Name}, p: p, path: path}, nil
}

// InstancesV2 implements cloudprovider.Interface.
func (s *staticCloud) InstancesV2() (cloudprovider.InstancesV2, bool) { return s, true }

// Close implements Cloud.
func (s *staticCloud) Close() error { return s.p.Close() }

// lookup finds node's entry; ok is false when the file does not list it.
func (s *staticCloud) lookup(node *corev1.Node) (*static.Node, bool, error) {
	if node == nil {
		return nil, false, errNoNode
	}
	f, err := s.p.File()
	if err != nil {
		return nil, false, err
	}
	n, ok, err := f.Lookup(node.Name, node.Spec.ProviderID)
	if err != nil {
		return nil, false, fmt.Errorf("static_file %s: %w", s.path, err)
	}
	return n, ok, nil
}

// InstanceExists implements cloudprovider.InstancesV2: a Node the file does
// not list has no instance. A file that does not parse is an error, never
// "does not exist", so an editing mistake deletes no Node.
func (s *staticCloud) InstanceExists(_ context.Context, node *corev1.Node) (bool, error) {
	_, ok, err := s.lookup(node)
	return ok, err
}

// InstanceShutdown implements cloudprovider.InstancesV2.
func (s *staticCloud) InstanceShutdown(_ context.Context, node *corev1.Node) (bool, error) {
	n, ok, err := s.lookup(node)
	if err != nil {
		return false, err
	}
	if !ok {
		return false, cloudprovider.InstanceNotFound
	}
	return n.Shutdown, nil
}

// InstanceMetadata implements cloudprovider.InstancesV2.
func (s *staticCloud) InstanceMetadata(_ context.Context, node *corev1.Node) (*cloudprovider.InstanceMetadata, error) {
	n, ok, err := s.lookup(node)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, cloudprovider.InstanceNotFound
	}
	return toInstanceMetadata(n.Metadata()), nil
}
