package runtimeclass

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	nodev1listers "k8s.io/client-go/listers/node/v1"
	"k8s.io/client-go/tools/cache"
)

// Classes looks RuntimeClasses up in an informer's cache.
type Classes struct {
	factory informers.SharedInformerFactory
	lister  nodev1listers.RuntimeClassLister
	synced  cache.InformerSynced
}

// New returns Classes watching client's RuntimeClasses; Start starts the
// watch.
func New(client kubernetes.Interface) *Classes {
	f := informers.NewSharedInformerFactory(client, 0)
	inf := f.Node().V1().RuntimeClasses()
	return &Classes{factory: f, lister: inf.Lister(), synced: inf.Informer().HasSynced}
}

// Start lists and watches RuntimeClasses until ctx ends.
func (c *Classes) Start(ctx context.Context) {
	if c != nil {
		c.factory.Start(ctx.Done())
	}
}

// Handler is the runtime handler pod's sandbox runs with: "" (the
// runtime's default) for a pod without a runtimeClassName or on a node
// without an API server, else its RuntimeClass's handler. A RuntimeClass
// not found, or not known yet because the first list has not arrived, is an
// error naming it.
func (c *Classes) Handler(pod *corev1.Pod) (string, error) {
	name := pod.Spec.RuntimeClassName
	if c == nil || name == nil || *name == "" {
		return "", nil
	}
	if !c.synced() {
		return "", fmt.Errorf("RuntimeClass %q: RuntimeClasses not read from the API server yet", *name)
	}
	rc, err := c.lister.Get(*name)
	switch {
	case apierrors.IsNotFound(err):
		return "", fmt.Errorf("RuntimeClass %q not found", *name)
	case err != nil:
		return "", fmt.Errorf("failed to look up RuntimeClass %q: %w", *name, err)
	}
	return rc.Handler, nil
}
