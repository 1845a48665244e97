package benchvs

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// namespace holds the benchmark's pods.
const namespace = metav1.NamespaceDefault

// podScript keeps the container running and makes it exit at once on
// SIGTERM (a shell waiting on a child returns from wait for a trapped
// signal), so deletion measures the agent, not a grace period.
const podScript = "trap 'exit 0' TERM; sleep 86400 & wait"

// benchPod is the one pod spec both agents run, bound to node.
func benchPod(name, node, image string) *corev1.Pod {
	no := false
	grace := int64(30)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"app": "benchvs"}},
		Spec: corev1.PodSpec{
			NodeName: node,
			// There is no cluster DNS here: with ClusterFirst both agents
			// would warn (MissingClusterDNS events) on every sync.
			DNSPolicy:                     corev1.DNSDefault,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name: "main", Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"/bin/sh", "-c", podScript},
			}},
		},
	}
}

// tracker records when a watch first showed each pod Running, Ready, in
// a terminal phase (ended) and deleted.
type tracker struct {
	mu                          sync.Mutex
	running, ready, ended, gone map[string]time.Time
	// settled, when set, is called once for each pod, the first time it
	// is seen Running or ended.
	settled      func(name string)
	stopInformer context.CancelFunc
	factory      informers.SharedInformerFactory
}

// watchPods starts a pod informer on node's pods and waits for its cache;
// settled is the tracker's hook (nil: none).
func watchPods(ctx context.Context, admin kubernetes.Interface, node string, settled func(name string)) (*tracker, error) {
	t := &tracker{running: map[string]time.Time{}, ready: map[string]time.Time{}, ended: map[string]time.Time{}, gone: map[string]time.Time{}, settled: settled}
	t.factory = informers.NewSharedInformerFactoryWithOptions(admin, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" + node }))
	inf := t.factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    t.see,
		UpdateFunc: func(_, obj any) { t.see(obj) },
		DeleteFunc: t.deleted,
	}); err != nil {
		return nil, err
	}
	ictx, cancel := context.WithCancel(ctx)
	t.stopInformer = cancel
	t.factory.Start(ictx.Done())
	for typ, ok := range t.factory.WaitForCacheSync(ictx.Done()) {
		if !ok {
			t.stop()
			return nil, fmt.Errorf("pod informer %v did not sync", typ)
		}
	}
	return t, nil
}

func (t *tracker) stop() {
	t.stopInformer()
	t.factory.Shutdown()
}

func (t *tracker) see(obj any) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	t.mu.Lock()
	_, wasRunning := t.running[p.Name]
	_, wasEnded := t.ended[p.Name]
	if !wasRunning && p.Status.Phase == corev1.PodRunning {
		t.running[p.Name] = now
	}
	if _, seen := t.ready[p.Name]; !seen && podReady(p) {
		t.ready[p.Name] = now
	}
	if !wasEnded && (p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded) {
		t.ended[p.Name] = now
	}
	_, isRunning := t.running[p.Name]
	_, isEnded := t.ended[p.Name]
	t.mu.Unlock()
	if t.settled != nil && !wasRunning && !wasEnded && (isRunning || isEnded) {
		t.settled(p.Name)
	}
}

// times is a copy of one of the tracker's maps, taken under its lock.
func (t *tracker) times(which func(*tracker) map[string]time.Time) map[string]time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]time.Time, len(which(t)))
	for k, v := range which(t) {
		out[k] = v
	}
	return out
}

func (t *tracker) deleted(obj any) {
	now := time.Now()
	name := ""
	switch o := obj.(type) {
	case *corev1.Pod:
		name = o.Name
	case cache.DeletedFinalStateUnknown:
		if p, ok := o.Obj.(*corev1.Pod); ok {
			name = p.Name
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, seen := t.gone[name]; !seen && name != "" {
		t.gone[name] = now
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// since is each name's time in seen minus its time in from; ok is false
// while any name has no time in seen yet.
func (t *tracker) since(seen map[string]time.Time, from map[string]time.Time) (ds []time.Duration, last time.Time, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for name, start := range from {
		at, have := seen[name]
		if !have {
			return nil, time.Time{}, false
		}
		ds = append(ds, at.Sub(start))
		if at.After(last) {
			last = at
		}
	}
	return ds, last, true
}

// await polls until every pod in from has a time in which(t), or limit.
func (t *tracker) await(ctx context.Context, what string, from map[string]time.Time, limit time.Duration, which func(*tracker) map[string]time.Time) ([]time.Duration, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if ds, last, ok := t.since(which(t), from); ok {
			return ds, last, nil
		}
		select {
		case <-ctx.Done():
			t.mu.Lock()
			n := len(which(t))
			t.mu.Unlock()
			return nil, time.Time{}, fmt.Errorf("%s: %d of %d pods after %s: %w", what, n, len(from), limit, ctx.Err())
		case <-tick.C:
		}
	}
}

// each runs f on every pod at once and returns when each call was made.
func atOnce(pods []*corev1.Pod, f func(*corev1.Pod) error) (map[string]time.Time, error) {
	var (
		mu    sync.Mutex
		at    = map[string]time.Time{}
		first error
		wg    sync.WaitGroup
	)
	start := make(chan struct{})
	for _, p := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			now := time.Now()
			err := f(p)
			mu.Lock()
			defer mu.Unlock()
			at[p.Name] = now
			if err != nil && first == nil {
				first = fmt.Errorf("pod %s: %w", p.Name, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	return at, first
}

// limitFor is how long n pods may take to start or go.
func limitFor(n int) time.Duration { return 3*time.Minute + time.Duration(n)*3*time.Second }

// startPods creates pods at once and waits until every one is Ready;
// it returns the creation times.
func startPods(ctx context.Context, admin kubernetes.Interface, t *tracker, pods []*corev1.Pod) (created map[string]time.Time, err error) {
	created, err = atOnce(pods, func(p *corev1.Pod) error {
		_, err := admin.CoreV1().Pods(namespace).Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return nil, err
	}
	if _, _, err := t.await(ctx, "Ready", created, limitFor(len(pods)), func(t *tracker) map[string]time.Time { return t.ready }); err != nil {
		return nil, err
	}
	return created, nil
}

// deletePods deletes pods at once and waits until every object is gone.
func deletePods(ctx context.Context, admin kubernetes.Interface, t *tracker, pods []*corev1.Pod) ([]time.Duration, error) {
	deleted, err := atOnce(pods, func(p *corev1.Pod) error {
		return admin.CoreV1().Pods(namespace).Delete(ctx, p.Name, metav1.DeleteOptions{})
	})
	if err != nil {
		return nil, err
	}
	ds, _, err := t.await(ctx, "gone", deleted, limitFor(len(pods)), func(t *tracker) map[string]time.Time { return t.gone })
	return ds, err
}

// runBatch creates n pods at once on node, waits until all are Ready,
// deletes them at once and waits until all are gone.
func runBatch(ctx context.Context, admin kubernetes.Interface, node, image string, n int) (Batch, error) {
	b := Batch{Pods: n, Load: Load{Start: loadAverage()}}
	t, err := watchPods(ctx, admin, node, nil)
	if err != nil {
		return b, err
	}
	defer t.stop()
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = benchPod(fmt.Sprintf("batch%d-%d", n, i), node, image)
	}
	created, err := startPods(ctx, admin, t, pods)
	if err != nil {
		return b, err
	}
	running, last, _ := t.since(t.running, created)
	ready, _, _ := t.since(t.ready, created)
	first := time.Time{}
	for _, c := range created {
		if first.IsZero() || c.Before(first) {
			first = c
		}
	}
	b.Running, b.Ready, b.PodsPerSecond = Percentiles(running), Percentiles(ready), Throughput(n, first, last)
	gone, err := deletePods(ctx, admin, t, pods)
	if err != nil {
		return b, err
	}
	b.Deleted = Percentiles(gone)
	b.Load.End = loadAverage()
	return b, nil
}
