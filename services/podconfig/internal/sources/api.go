package sources

import (
	"context"
	"log/slog"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/microlet/microlet/internal/podsource"
)

// API is the API server source: the pods bound to this node, in every
// namespace, listed and watched by a client-go Reflector. Each change hands
// the whole set to the sink, the way the kubelet's UndeltaStore does.
type API struct {
	// Client talks to the API server, normally with the node's identity.
	Client kubernetes.Interface
	// NodeName selects pods by spec.nodeName.
	NodeName string
	// Log receives problems.
	Log *slog.Logger
	// Report hears about failed lists and watches; optional.
	Report Reporter
}

// Run lists and watches until ctx ends; the Reflector retries with backoff
// while the API server is unreachable, keeping the last set meanwhile.
func (a *API) Run(ctx context.Context, sink Sink) error {
	if a.Log == nil {
		a.Log = slog.Default()
	}
	if a.Report == nil {
		a.Report = nopReporter{}
	}
	base := cache.NewListWatchFromClient(a.Client.CoreV1().RESTClient(), "pods", metav1.NamespaceAll,
		fields.OneTermEqualSelector("spec.nodeName", a.NodeName))
	// Wrapped only to hear about failures; the Reflector does the retrying.
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			obj, err := base.ListWithContext(ctx, opts)
			if err != nil {
				a.Report.Error(podsource.APISource, "list pods", err)
			} else {
				a.Report.OK(podsource.APISource)
			}
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := base.WatchWithContext(ctx, opts)
			if err != nil {
				a.Report.Error(podsource.APISource, "watch pods", err)
			}
			return w, err
		},
	}
	store := cache.NewUndeltaStore(func(objs []any) {
		pods := make([]*corev1.Pod, 0, len(objs))
		for _, o := range objs {
			if p, ok := o.(*corev1.Pod); ok {
				pods = append(pods, p)
			}
		}
		sink(podsource.APISource, pods)
	}, cache.MetaNamespaceKeyFunc)
	r := cache.NewReflectorWithOptions(lw, &corev1.Pod{}, store, cache.ReflectorOptions{Name: "podconfig-api-source"})
	r.RunWithContext(ctx)
	return nil
}
