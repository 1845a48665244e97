package benchvs

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// churnDeleters is how many deletions may be in flight at once.
const churnDeleters = 8

// churn creates ChurnRate pods a second on a's node for ChurnWindow,
// deletes each as soon as the watch shows it Running or ended (an agent
// may reject pods while too many are on the node), waits until every one
// is gone and measures the whole span, first creation to last pod gone.
// The watch stays open throughout: it is what times the pods.
func (b *bench) churn(ctx context.Context, a *started) (*Churn, error) {
	n := int(math.Round(b.ChurnRate * b.ChurnWindow.Seconds()))
	if n <= 0 {
		return nil, fmt.Errorf("%g pods/s for %s is no pod", b.ChurnRate, b.ChurnWindow)
	}
	interval := time.Duration(float64(time.Second) / b.ChurnRate)

	var (
		mu        sync.Mutex
		created   = map[string]time.Time{}
		deleteReq = map[string]time.Time{}
		failure   error
	)
	// Each of the n pods settles once, so the queue never holds more than
	// n names and the watch's handler never blocks on it.
	settled := make(chan string, n)
	t, err := watchPods(ctx, b.admin, a.node, func(name string) {
		mu.Lock()
		_, ours := created[name]
		mu.Unlock()
		if ours {
			settled <- name
		}
	})
	if err != nil {
		return nil, err
	}
	defer t.stop()
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if failure == nil {
			failure = err
		}
	}
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return failure
	}
	pods := b.admin.CoreV1().Pods(namespace)

	work := func(ctx context.Context) error {
		dctx, stopDeleters := context.WithCancel(ctx)
		defer stopDeleters()
		for range churnDeleters {
			go func() {
				for {
					select {
					case <-dctx.Done():
						return
					case name := <-settled:
						now := time.Now()
						mu.Lock()
						deleteReq[name] = now
						mu.Unlock()
						if err := pods.Delete(dctx, name, metav1.DeleteOptions{}); err != nil && dctx.Err() == nil {
							fail(fmt.Errorf("delete pod %s: %w", name, err))
						}
					}
				}
			}()
		}

		var creators sync.WaitGroup
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; i < n && failed() == nil; i++ {
			if i > 0 {
				select {
				case <-ctx.Done():
					creators.Wait()
					return ctx.Err()
				case <-tick.C:
				}
			}
			p := benchPod(fmt.Sprintf("churn-%d", i), a.node, b.image)
			creators.Add(1)
			go func() {
				defer creators.Done()
				now := time.Now()
				mu.Lock()
				created[p.Name] = now
				mu.Unlock()
				if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
					fail(fmt.Errorf("create pod %s: %w", p.Name, err))
				}
			}()
		}
		creators.Wait()
		if err := failed(); err != nil {
			return err
		}

		// Drain: every pod settled, deleted and gone.
		mu.Lock()
		all := make(map[string]time.Time, len(created))
		for k, v := range created {
			all[k] = v
		}
		mu.Unlock()
		remaining := len(all) - len(t.times(func(t *tracker) map[string]time.Time { return t.gone }))
		_, _, err := t.await(ctx, "gone", all, limitFor(remaining), func(t *tracker) map[string]time.Time { return t.gone })
		if ferr := failed(); ferr != nil {
			return ferr
		}
		if err != nil {
			mu.Lock()
			deleted := make(map[string]time.Time, len(deleteReq))
			for k, v := range deleteReq {
				deleted[k] = v
			}
			mu.Unlock()
			return fmt.Errorf("%w; left: %s", err, left(all, t, deleted))
		}
		return nil
	}

	w, err := b.measureWhile(ctx, a, 0, work)
	if err != nil {
		return nil, err
	}
	running := t.times(func(t *tracker) map[string]time.Time { return t.running })
	ended := t.times(func(t *tracker) map[string]time.Time { return t.ended })
	gone := t.times(func(t *tracker) map[string]time.Time { return t.gone })
	mu.Lock()
	defer mu.Unlock()
	c := &Churn{
		Pods: len(created), Rate: b.ChurnRate,
		Rejected: rejected(created, running, ended),
		Running:  Percentiles(Elapsed(created, running)),
		Deleted:  Percentiles(Elapsed(deleteReq, gone)),
		Window:   w,
	}
	c.RequestsPerPod = PerPod(w.Requests, w.Seconds, c.Pods)
	return c, nil
}

// left describes the pods of created not gone yet (the first few): what
// the watch last showed of each and whether its deletion was asked for.
func left(created map[string]time.Time, t *tracker, deleted map[string]time.Time) string {
	running := t.times(func(t *tracker) map[string]time.Time { return t.running })
	ended := t.times(func(t *tracker) map[string]time.Time { return t.ended })
	gone := t.times(func(t *tracker) map[string]time.Time { return t.gone })
	var names []string
	for name := range created {
		if _, ok := gone[name]; !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	const most = 10
	var parts []string
	for i, name := range names {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(names)-most))
			break
		}
		state := "never seen Running or ended"
		if _, ok := ended[name]; ok {
			state = "ended"
		}
		if _, ok := running[name]; ok {
			state = "Running"
		}
		if _, ok := deleted[name]; ok {
			state += ", delete requested"
		}
		parts = append(parts, name+" ("+state+")")
	}
	return strings.Join(parts, ", ")
}

// rejected counts the pods that ended without having been Running.
func rejected(created, running, ended map[string]time.Time) int {
	n := 0
	for name := range created {
		_, ran := running[name]
		_, over := ended[name]
		if over && !ran {
			n++
		}
	}
	return n
}
