package cache_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// callerKey marks a caller's context, for finding its values in
// Event.Context.
type callerKey struct{}

// loadContexts records the contexts loaders are called with and the
// Events a Cache reports.
type loadContexts struct {
	mu      sync.Mutex
	loaders []context.Context // what each loader call was given
	loads   []context.Context // each EventLoad's Context
	events  []cache.Event
}

func (lc *loadContexts) observe(e cache.Event) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.events = append(lc.events, e)
	if e.Kind == cache.EventLoad {
		lc.loads = append(lc.loads, e.Context)
	}
}

// load returns v, noting the context it is called with.
func (lc *loadContexts) load(v string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		lc.mu.Lock()
		lc.loaders = append(lc.loaders, ctx)
		lc.mu.Unlock()
		return v, nil
	}
}

func (lc *loadContexts) loadMany(ctx context.Context, keys []string) (map[string]string, error) {
	lc.mu.Lock()
	lc.loaders = append(lc.loaders, ctx)
	lc.mu.Unlock()
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		out[k] = "v"
	}
	return out, nil
}

// check fails tb unless every loader call was reported by exactly one
// EventLoad whose Context is the very context the loader was given (so
// that a loader wrapper and an Observer can tell one load apart), every
// Event has a Context, and the events of kinds (at least one each) carry
// the caller's values.
func (lc *loadContexts) check(tb testing.TB, caller string, kinds ...cache.EventKind) {
	tb.Helper()
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if len(lc.loaders) == 0 || len(lc.loaders) != len(lc.loads) {
		tb.Fatalf("%d loader calls, %d EventLoads; want as many, at least one", len(lc.loaders), len(lc.loads))
	}
	for i, ctx := range lc.loaders {
		n := 0
		for _, e := range lc.loads {
			if e == ctx {
				n++
			}
		}
		if n != 1 {
			tb.Errorf("loader call %d: its context is the Context of %d EventLoads, want 1", i, n)
		}
		if got := ctx.Value(callerKey{}); got != caller {
			tb.Errorf("loader call %d: the caller's value is %v, want %q", i, got, caller)
		}
	}
	seen := map[cache.EventKind]bool{}
	for _, e := range lc.events {
		if e.Context == nil {
			tb.Errorf("%v event for %q has no Context", e.Kind, e.Key)
			continue
		}
		for _, k := range kinds {
			if e.Kind == k {
				seen[k] = true
				if got := e.Context.Value(callerKey{}); got != caller {
					tb.Errorf("%v event: the caller's value is %v, want %q", k, got, caller)
				}
			}
		}
	}
	for _, k := range kinds {
		if !seen[k] {
			tb.Errorf("no %v event", k)
		}
	}
}

// Every loader call is reported by one EventLoad carrying the context the
// loader ran on, whichever path called it: a miss, a batch, the refresh
// of a stale value, the replacement of an entry nobody can decode, a load
// without the server (fail open); the other events of the call carry the
// caller's values.
func TestEvent_Context(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	tests := []struct {
		name  string
		kinds []cache.EventKind // that must carry the caller's values
		run   func(t *testing.T, ctx context.Context, lc *loadContexts)
	}{
		{"miss", []cache.EventKind{cache.EventMiss, cache.EventHit}, func(t *testing.T, ctx context.Context, lc *loadContexts) {
			c, _ := newCache(t, s, &cache.Options{Observer: lc.observe})
			for range 2 {
				if _, err := cache.GetOrLoad(ctx, c, "k", lc.load("v")); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"batch", []cache.EventKind{cache.EventMiss}, func(t *testing.T, ctx context.Context, lc *loadContexts) {
			c, _ := newCache(t, s, &cache.Options{Observer: lc.observe})
			if _, err := cache.GetOrLoadMany(ctx, c, []string{"a", "b"}, lc.loadMany); err != nil {
				t.Fatal(err)
			}
		}},
		{"refresh", []cache.EventKind{cache.EventStale, cache.EventRefresh}, func(t *testing.T, ctx context.Context, lc *loadContexts) {
			clk := newClock()
			c, _ := newCache(t, s, &cache.Options{Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: time.Hour}, Now: clk.Now, Observer: lc.observe})
			if _, err := cache.GetOrLoad(ctx, c, "k", lc.load("v1")); err != nil {
				t.Fatal(err)
			}
			clk.Advance(2 * time.Minute)
			if _, err := cache.GetOrLoad(ctx, c, "k", lc.load("v2")); err != nil {
				t.Fatal(err)
			}
			redistest.WaitFor(t, ctx, "the refresh to end", func() bool { return !cache.RefreshRunning(c, "k") })
		}},
		{"undecodable entry", []cache.EventKind{cache.EventMiss}, func(t *testing.T, ctx context.Context, lc *loadContexts) {
			ns := namespace(t)
			c, rc := newCache(t, s, &cache.Options{Namespace: ns, Observer: lc.observe})
			if err := rc.Set(ctx, valueKey(ns, "k"), "not an entry", time.Minute).Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := cache.GetOrLoad(ctx, c, "k", lc.load("v")); err != nil {
				t.Fatal(err)
			}
		}},
		{"wait", []cache.EventKind{cache.EventWait}, func(t *testing.T, ctx context.Context, lc *loadContexts) {
			ns := namespace(t)
			a, _ := newCache(t, s, &cache.Options{Namespace: ns, Observer: lc.observe})
			b, _ := newCache(t, s, &cache.Options{Namespace: ns, Observer: lc.observe})
			started, release := make(chan struct{}), make(chan struct{})
			first := lc.load("v")
			ra := goGetOrLoad(ctx, a, "k", func(ctx context.Context) (string, error) {
				close(started)
				select {
				case <-release:
					return first(ctx)
				case <-ctx.Done():
					return "", ctx.Err()
				}
			})
			redistest.Recv(t, ctx, started, "a's load to start")
			rb := goGetOrLoad(ctx, b, "k", lc.load("b loaded"))
			redistest.WaitFor(t, ctx, "b waiting", func() bool { return b.Stats().Waits == 1 })
			close(release)
			for _, ch := range []<-chan result[string]{ra, rb} {
				if r := redistest.Recv(t, ctx, ch, "GetOrLoad"); r.err != nil || r.v != "v" {
					t.Fatalf("GetOrLoad = %q, %v; want a's value", r.v, r.err)
				}
			}
		}},
		{"fail open", []cache.EventKind{cache.EventMiss, cache.EventFailOpen}, func(t *testing.T, ctx context.Context, lc *loadContexts) {
			rc, _ := deadClient(t)
			c := newCacheOn(t, rc, &cache.Options{Observer: lc.observe})
			for range 2 {
				if _, err := cache.GetOrLoad(ctx, c, "k", lc.load("v")); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lc := &loadContexts{}
			ctx := context.WithValue(testCtx(t), callerKey{}, tt.name)
			tt.run(t, ctx, lc)
			lc.check(t, tt.name, tt.kinds...)
		})
	}
}
