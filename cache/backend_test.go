package cache_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
)

// concurrency counts the loads of a backend running at once and the most
// seen at once.
type concurrency struct {
	cur, peak atomic.Int64
}

func (c *concurrency) enter() int64 {
	n := c.cur.Add(1)
	for {
		old := c.peak.Load()
		if n <= old || c.peak.CompareAndSwap(old, n) {
			return n
		}
	}
}

func (c *concurrency) leave() { c.cur.Add(-1) }

// cappedProcesses returns n Caches of one namespace on s (as n processes)
// with the backend "db" capped at limit, and opts' other fields.
func cappedProcesses(t *testing.T, s *redistest.Server, n, limit int, opts cache.Options) []*cache.Cache {
	t.Helper()
	opts.Namespace = namespace(t)
	opts.Backends = map[string]int{"db": limit}
	cs := make([]*cache.Cache, n)
	for i := range cs {
		cs[i] = newCacheOn(t, s.Client(t), &opts)
	}
	return cs
}

// until polls cond every millisecond until it holds or ctx ends: WaitFor
// for loaders, which must not end the test themselves.
func until(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

func backendWaits(cs ...*cache.Cache) uint64 {
	var sum cache.Stats
	for _, c := range cs {
		sum = sum.Add(c.Stats())
	}
	return sum.BackendWaits
}

// Twelve distinct cold keys requested at once from three processes, with
// the backend capped at two: the loader never runs more than twice at
// once, and does run twice at once (the first two loads hold on until the
// ten others wait for a permit); every caller gets its value.
func TestGetOrLoad_backendCap(t *testing.T) {
	const limit, keys = 2, 12
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		cs := cappedProcesses(t, s, 3, limit, cache.Options{Backend: "db"})
		var conc concurrency
		load := func(key string) func(context.Context) (string, error) {
			return func(ctx context.Context) (string, error) {
				conc.enter()
				defer conc.leave()
				// Hold on until every other load waits for a permit (or
				// more loads than the cap run, which fails the test).
				err := until(ctx, func() bool { return backendWaits(cs...) >= keys-limit || conc.peak.Load() > limit })
				return "v:" + key, err
			}
		}
		results := make([]<-chan result[string], keys)
		for i := range keys {
			key := fmt.Sprintf("k%d", i)
			results[i] = goGetOrLoad(ctx, cs[i%len(cs)], key, load(key))
		}
		for i, ch := range results {
			r := redistest.Recv(t, ctx, ch, "a caller's value")
			if want := fmt.Sprintf("v:k%d", i); r.err != nil || r.v != want {
				t.Errorf("k%d = %q, %v; want %q", i, r.v, r.err, want)
			}
		}
		if got := conc.peak.Load(); got != limit {
			t.Errorf("at most %d loads ran at once, want exactly %d", got, limit)
		}
	})
}

// GetOrLoadMany's batch loads take a permit too: two processes' batches
// of distinct keys, capped at one, run one after the other.
func TestGetOrLoadMany_backendCap(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		cs := cappedProcesses(t, s, 2, 1, cache.Options{})
		var conc concurrency
		load := func(ctx context.Context, keys []string) (map[string]string, error) {
			conc.enter()
			defer conc.leave()
			// The first batch holds the permit until the other waits.
			if err := until(ctx, func() bool { return backendWaits(cs...) == 1 || conc.peak.Load() > 1 }); err != nil {
				return nil, err
			}
			m := map[string]string{}
			for _, k := range keys {
				m[k] = "v:" + k
			}
			return m, nil
		}
		errs := make(chan error, 2)
		for i, c := range cs {
			go func() {
				ks := []string{fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i), fmt.Sprintf("c%d", i)}
				got, err := cache.GetOrLoadMany(ctx, c, ks, load, cache.WithBackend("db"))
				if err == nil && len(got) != len(ks) {
					err = fmt.Errorf("got %v for %v", got, ks)
				}
				errs <- err
			}()
		}
		for range cs {
			if err := redistest.Recv(t, ctx, errs, "a batch"); err != nil {
				t.Error(err)
			}
		}
		if got := conc.peak.Load(); got != 1 {
			t.Errorf("%d batch loads ran at once, want 1", got)
		}
	})
}

// A cold caller whose wait budget ends while every permit is held gets
// ErrBackendBusy naming the backend, and its loader never runs: after its
// WaitTimeout, and when its own ctx ends first.
func TestGetOrLoad_backendBusy(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		cs := cappedProcesses(t, s, 2, 1, cache.Options{})
		a, b := cs[0], cs[1]
		started, release := make(chan struct{}), make(chan struct{})
		defer close(release)
		held := make(chan result[string], 1)
		go func() {
			v, err := cache.GetOrLoad(ctx, a, "slow", heldLoader(started, release, "slow"), cache.WithBackend("db"))
			held <- result[string]{v, err}
		}()
		redistest.Recv(t, ctx, started, "the load holding the permit")

		var calls atomic.Int32
		_, err := cache.GetOrLoad(ctx, b, "cold", neverLoad[string](&calls), cache.WithBackend("db"), cache.WithWaitTimeout(50*time.Millisecond))
		if !errors.Is(err, cache.ErrBackendBusy) || !strings.Contains(err.Error(), `"db"`) {
			t.Errorf("GetOrLoad after its WaitTimeout: %v, want ErrBackendBusy naming \"db\"", err)
		}

		cctx, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() {
			_, err := cache.GetOrLoad(cctx, b, "cold2", neverLoad[string](&calls), cache.WithBackend("db"))
			got <- err
		}()
		redistest.WaitFor(t, ctx, "the second load to wait for a permit", func() bool { return b.Stats().BackendWaits == 2 })
		cancel()
		err = redistest.Recv(t, ctx, got, "the cancelled caller")
		if !errors.Is(err, cache.ErrBackendBusy) || !errors.Is(err, context.Canceled) {
			t.Errorf("GetOrLoad whose ctx ended: %v, want ErrBackendBusy and context.Canceled", err)
		}
		if n := calls.Load(); n != 0 {
			t.Errorf("the loader ran %d times without a permit", n)
		}
	})
}

// A process waiting for another's load that got no permit is told so: its
// error matches ErrRemoteLoad and ErrBackendBusy.
func TestGetOrLoad_backendBusyRemote(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		cs := cappedProcesses(t, s, 3, 1, cache.Options{Backend: "db"})
		started, release := make(chan struct{}), make(chan struct{})
		defer close(release)
		_ = goGetOrLoad(ctx, cs[0], "slow", heldLoader(started, release, "slow"))
		redistest.Recv(t, ctx, started, "the load holding the permit")

		var calls atomic.Int32
		loader := goGetOrLoad(ctx, cs[1], "k", neverLoad[string](&calls))
		redistest.WaitFor(t, ctx, "the claimed load to wait for a permit", func() bool { return cs[1].Stats().BackendWaits == 1 })
		waiter := goGetOrLoad(ctx, cs[2], "k", neverLoad[string](&calls))
		redistest.WaitFor(t, ctx, "the other process to wait for the claim", func() bool { return cs[2].Stats().Waits == 1 })
		// A claimed load outlives its callers (the fleet waits for it):
		// closing its process ends its wait for a permit.
		if err := cs[1].Close(); err != nil {
			t.Fatal(err)
		}
		redistest.Recv(t, ctx, loader, "the closed process's load")
		r := redistest.Recv(t, ctx, waiter, "the waiting process")
		if !errors.Is(r.err, cache.ErrRemoteLoad) || !errors.Is(r.err, cache.ErrBackendBusy) {
			t.Errorf("waiter of a load that got no permit: %v, want ErrRemoteLoad and ErrBackendBusy", r.err)
		}
		if n := calls.Load(); n != 0 {
			t.Errorf("the loader ran %d times without a permit", n)
		}
	})
}

// A stale value is served at once while its refresh waits for a permit;
// the refresh runs once the permit is free.
func TestGetOrLoad_backendStaleServed(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		clk := newClock()
		cs := cappedProcesses(t, s, 2, 1, cache.Options{Backend: "db", Now: clk.Now,
			Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: time.Hour}})
		a, b := cs[0], cs[1]
		if v, err := cache.GetOrLoad(ctx, a, "k", constLoader("v1", new(atomic.Int64))); err != nil || v != "v1" {
			t.Fatalf("first load = %q, %v", v, err)
		}
		started, release := make(chan struct{}), make(chan struct{})
		held := goGetOrLoad(ctx, b, "slow", heldLoader(started, release, "slow"))
		redistest.Recv(t, ctx, started, "the load holding the permit")
		clk.Advance(2 * time.Minute)

		refreshed := make(chan struct{})
		v, err := cache.GetOrLoad(ctx, a, "k", func(context.Context) (string, error) {
			close(refreshed)
			return "v2", nil
		})
		if err != nil || v != "v1" {
			t.Fatalf("stale read = %q, %v; want v1 at once", v, err)
		}
		redistest.WaitFor(t, ctx, "the refresh to wait for a permit", func() bool { return a.Stats().BackendWaits == 1 })
		select {
		case <-refreshed:
			t.Fatal("the refresh loaded while the permit was held")
		default:
		}
		close(release)
		if r := redistest.Recv(t, ctx, held, "the slow load"); r.err != nil {
			t.Fatal(r.err)
		}
		redistest.Recv(t, ctx, refreshed, "the refresh's load")
	})
}

func TestOptions_backendsInvalid(t *testing.T) {
	s := redistest.Shared(t, redistest.Miniredis)
	tests := []struct {
		name string
		opts cache.Options
		want string
	}{
		{name: "empty name", opts: cache.Options{Backends: map[string]int{"": 1}}, want: "empty backend name"},
		{name: "zero cap", opts: cache.Options{Backends: map[string]int{"db": 0}}, want: `Backends["db"] 0`},
		{name: "unknown default", opts: cache.Options{Backends: map[string]int{"db": 1}, Backend: "api"}, want: `Backend "api"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := cache.New(s.Client(t), &tt.opts)
			if !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want ErrInvalid naming %s", err, tt.want)
			}
		})
	}
	c := newCacheOn(t, s.Client(t), &cache.Options{Backends: map[string]int{"db": 1}})
	var calls atomic.Int32
	if _, err := cache.GetOrLoad(testCtx(t), c, "k", neverLoad[string](&calls), cache.WithBackend("api")); !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), `"api"`) {
		t.Errorf("WithBackend of an unknown backend: %v, want ErrInvalid naming it", err)
	}
}

// A refresh that waited for a permit reads its key again before its
// loader runs, and does not load a key whose value changed meanwhile
// (another process loaded it, or a Set came): one load per key per
// expiry holds with a cap too. (Checked only before the wait, it loaded
// beside the new value, and only its write was skipped; the robustness
// suite's one-load check found it on Valkey.) For GetOrLoad's refresh and
// for a batch's, which loads the keys that did not change.
func TestGetOrLoad_backendRefreshRebuilt(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, batch := range []bool{false, true} {
			t.Run(map[bool]string{false: "one", true: "batch"}[batch], func(t *testing.T) {
				ctx := testCtx(t)
				clk := newClock()
				ns := namespace(t)
				opts := &cache.Options{Namespace: ns, Backends: map[string]int{"db": 1}, Backend: "db", Now: clk.Now,
					Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: time.Hour}}
				a, b := newCacheOn(t, s.Client(t), opts), newCacheOn(t, s.Client(t), opts)
				for _, k := range []string{"k1", "k2"} {
					if err := cache.Set(ctx, a, k, "v1"); err != nil {
						t.Fatal(err)
					}
				}
				started, release := make(chan struct{}), make(chan struct{})
				held := goGetOrLoad(ctx, b, "slow", heldLoader(started, release, "slow"))
				redistest.Recv(t, ctx, started, "the load holding the permit")
				clk.Advance(2 * time.Minute)

				loaded := make(chan []string, 4)
				if batch {
					got, err := cache.GetOrLoadMany(ctx, a, []string{"k1", "k2"}, func(_ context.Context, keys []string) (map[string]string, error) {
						loaded <- keys
						out := map[string]string{}
						for _, k := range keys {
							out[k] = "v2"
						}
						return out, nil
					})
					if err != nil || got["k1"] != "v1" || got["k2"] != "v1" {
						t.Fatalf("stale batch = %v, %v; want v1 at once", got, err)
					}
				} else {
					v, err := cache.GetOrLoad(ctx, a, "k1", func(context.Context) (string, error) {
						loaded <- []string{"k1"}
						return "v2", nil
					})
					if err != nil || v != "v1" {
						t.Fatalf("stale read = %q, %v; want v1 at once", v, err)
					}
				}
				redistest.WaitFor(t, ctx, "the refresh to wait for a permit", func() bool { return a.Stats().BackendWaits == 1 })
				if err := cache.Set(ctx, b, "k1", "v9"); err != nil { // k1 is rebuilt meanwhile
					t.Fatal(err)
				}
				close(release)
				if r := redistest.Recv(t, ctx, held, "the slow load"); r.err != nil {
					t.Fatal(r.err)
				}
				rc := s.Client(t)
				lockKey := valueKey(ns, "k1") + ":lock"
				redistest.WaitFor(t, ctx, "k1's rebuild lock freed", func() bool { return rc.Exists(ctx, lockKey).Val() == 0 })
				if batch {
					if keys := redistest.Recv(t, ctx, loaded, "the batch's load"); len(keys) != 1 || keys[0] != "k2" {
						t.Errorf("the batch loaded %v; want [k2]: k1 changed while it waited", keys)
					}
				}
				select {
				case keys := <-loaded:
					t.Errorf("loaded %v after k1 changed while the refresh waited for its permit", keys)
				default:
				}
				if v, err := cache.Get[string](ctx, a, "k1"); err != nil || v != "v9" {
					t.Errorf("k1 = %q, %v; want the Set's v9", v, err)
				}
			})
		}
	})
}

// A miss that waited for a permit checks its claim before its loader
// runs: a Set (or Delete) that ended the claim meanwhile stands, and the
// caller reads the key again, getting the Set's value, with no load.
// (Loaded anyway, it answered with a value older than that Set, and cost
// the backend a load whose write was skipped; the robustness suite's
// one-load check found such a load after another process's, on Valkey.)
func TestGetOrLoad_backendClaimEnded(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		cs := cappedProcesses(t, s, 2, 1, cache.Options{Backend: "db"})
		a, b := cs[0], cs[1]
		started, release := make(chan struct{}), make(chan struct{})
		held := goGetOrLoad(ctx, b, "slow", heldLoader(started, release, "slow"))
		redistest.Recv(t, ctx, started, "the load holding the permit")
		var loads atomic.Int64
		got := goGetOrLoad(ctx, a, "k", constLoader("v2", &loads))
		redistest.WaitFor(t, ctx, "the miss to wait for a permit", func() bool { return a.Stats().BackendWaits == 1 })
		if err := cache.Set(ctx, b, "k", "v9"); err != nil { // ends a's claim
			t.Fatal(err)
		}
		close(release)
		if r := redistest.Recv(t, ctx, held, "the slow load"); r.err != nil {
			t.Fatal(r.err)
		}
		if r := redistest.Recv(t, ctx, got, "the miss's answer"); r.err != nil || r.v != "v9" {
			t.Errorf("GetOrLoad = %q, %v; want the Set's v9", r.v, r.err)
		}
		if n := loads.Load(); n != 0 {
			t.Errorf("%d loads after the Set ended the claim; want 0", n)
		}
	})
}
