package docker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/microlet/microlet/internal/testenv"
)

// fakeFetch is a fetch that counts its calls and, while blocked, holds
// every call until released.
type fakeFetch struct {
	calls    atomic.Int32
	inFlight atomic.Int32
	maxIn    atomic.Int32
	started  chan string
	release  chan struct{}
	mu       sync.Mutex
	value    string
	err      error
}

func newFakeFetch(blocked bool) *fakeFetch {
	f := &fakeFetch{started: make(chan string, 100), release: make(chan struct{}), value: "v1"}
	if !blocked {
		close(f.release)
	}
	return f
}

func (f *fakeFetch) fetch(ctx context.Context, key string) (string, error) {
	f.calls.Add(1)
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for {
		m := f.maxIn.Load()
		if n <= m || f.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	f.started <- key
	select {
	case <-f.release:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return key + "=" + f.value, f.err
}

func (f *fakeFetch) set(v string, err error) {
	f.mu.Lock()
	f.value, f.err = v, err
	f.mu.Unlock()
}

func TestKeyedCache(t *testing.T) {
	ctx := context.Background()
	newCache := func(f *fakeFetch, limit int, stale bool) (*keyedCache[string], *clocktesting.FakeClock) {
		clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
		return newKeyedCache(limit, 2*time.Second, time.Minute, stale, clk, f.fetch), clk
	}
	mustGet := func(t *testing.T, c *keyedCache[string], key, want string) {
		t.Helper()
		got, err := c.get(ctx, key)
		if err != nil || got != want {
			t.Fatalf("get(%s) = %q, %v; want %q", key, got, err, want)
		}
	}

	t.Run("at most limit fetches in flight", func(t *testing.T) {
		f := newFakeFetch(true)
		c, _ := newCache(f, 2, false)
		var wg sync.WaitGroup
		for i := range 6 {
			key := fmt.Sprintf("c%d", i)
			wg.Go(func() { mustGet(t, c, key, key+"=v1") })
		}
		<-f.started
		<-f.started
		close(f.release)
		wg.Wait()
		if got := f.maxIn.Load(); got != 2 {
			t.Errorf("at most %d fetches were in flight, want 2", got)
		}
		if got := f.calls.Load(); got != 6 {
			t.Errorf("%d fetches, want 6", got)
		}
	})

	t.Run("callers of one key share its fetch", func(t *testing.T) {
		f := newFakeFetch(true)
		c, _ := newCache(f, 4, false)
		var wg sync.WaitGroup
		for range 5 {
			wg.Go(func() { mustGet(t, c, "a", "a=v1") })
		}
		<-f.started
		close(f.release)
		wg.Wait()
		if got := f.calls.Load(); got != 1 {
			t.Errorf("%d fetches for 5 callers of one key, want 1", got)
		}
	})

	t.Run("a young value is reused, an old one fetched again", func(t *testing.T) {
		f := newFakeFetch(false)
		c, clk := newCache(f, 4, false)
		mustGet(t, c, "a", "a=v1")
		f.set("v2", nil)
		clk.Step(1999 * time.Millisecond)
		mustGet(t, c, "a", "a=v1")
		clk.Step(time.Millisecond)
		mustGet(t, c, "a", "a=v2")
		if got := f.calls.Load(); got != 2 {
			t.Errorf("%d fetches, want 2", got)
		}
	})

	t.Run("serve stale answers at once and refreshes behind", func(t *testing.T) {
		f := newFakeFetch(false)
		c, clk := newCache(f, 4, true)
		mustGet(t, c, "a", "a=v1")
		<-f.started
		f.release = make(chan struct{}) // block the refresh
		f.set("v2", nil)
		clk.Step(3 * time.Second)
		mustGet(t, c, "a", "a=v1") // stale, while the refresh waits
		<-f.started
		mustGet(t, c, "a", "a=v1") // joins nothing, starts nothing
		close(f.release)
		testEventually(t, func() bool { v, _ := c.get(ctx, "a"); return v == "a=v2" })
		if got := f.calls.Load(); got != 2 {
			t.Errorf("%d fetches, want 2", got)
		}
	})

	t.Run("errors are not kept", func(t *testing.T) {
		f := newFakeFetch(false)
		c, _ := newCache(f, 4, false)
		boom := errors.New("boom")
		f.set("v1", boom)
		if _, err := c.get(ctx, "a"); !errors.Is(err, boom) {
			t.Fatalf("get = %v, want boom", err)
		}
		f.set("v1", nil)
		mustGet(t, c, "a", "a=v1")
	})

	t.Run("a caller giving up leaves the value to the next", func(t *testing.T) {
		f := newFakeFetch(true)
		c, _ := newCache(f, 4, false)
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan error)
		go func() { _, err := c.get(cctx, "a"); done <- err }()
		<-f.started
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("get = %v, want Canceled", err)
		}
		close(f.release)
		mustGet(t, c, "a", "a=v1")
		if got := f.calls.Load(); got != 1 {
			t.Errorf("%d fetches, want 1", got)
		}
	})

	t.Run("keys nobody asks for are dropped", func(t *testing.T) {
		f := newFakeFetch(false)
		c, clk := newCache(f, 4, false)
		mustGet(t, c, "a", "a=v1")
		mustGet(t, c, "b", "b=v1")
		clk.Step(cacheIdle / 2)
		mustGet(t, c, "b", "b=v1")
		clk.Step(cacheIdle / 2)
		mustGet(t, c, "b", "b=v1")
		if got := c.len(); got != 1 {
			t.Errorf("%d keys cached, want 1 (b)", got)
		}
	})
}

// testEventually waits for cond (a refresh running behind).
func testEventually(t *testing.T, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, "condition", 30*time.Second, func() error {
		if cond() {
			return nil
		}
		return errors.New("not yet")
	})
}
