package cache_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
)

// The near cache's classic races, each on every server with CLIENT
// TRACKING (miniredis has none: the near cache is off there, and
// TestNear_hitsAndInvalidation checks that).

var trackingKinds = []redistest.Kind{redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster}

// fillHook runs armed once, right after the reply of the near cache's
// fill (the pipelined GET and PTTL) came back and before the Cache sees
// it: the moment in which an invalidation must win over the reply.
type fillHook struct {
	mu    sync.Mutex
	armed func()
}

func (h *fillHook) arm(fn func()) {
	h.mu.Lock()
	h.armed = fn
	h.mu.Unlock()
}

func (h *fillHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *fillHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *fillHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if len(cmds) == 2 && cmds[0].Name() == "get" && cmds[1].Name() == "pttl" {
			h.mu.Lock()
			fn := h.armed
			h.armed = nil
			h.mu.Unlock()
			if fn != nil {
				fn()
			}
		}
		return err
	}
}

// setAndWait sets key to v in a and waits until b was told (b's own
// earlier invalidation, arriving late, would drop what b reads next). b
// reads key first: the server tells a process of the keys it read.
func setAndWait(t *testing.T, ctx context.Context, a, b *cache.Cache, key, v string) {
	t.Helper()
	if _, err := cache.Get[string](ctx, b, key); err != nil && !errors.Is(err, cache.ErrMiss) && !errors.Is(err, loader.ErrNotFound) && !errors.Is(err, cache.ErrStale) {
		t.Fatal(err)
	}
	before := b.Stats().NearInvalidations
	if err := cache.Set(ctx, a, key, v); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, ctx, "the invalidation of "+key, func() bool { return b.Stats().NearInvalidations > before })
}

// hookedClient returns a new client for s with h added, closed at
// cleanup.
func hookedClient(t *testing.T, s *redistest.Server, h redis.Hook) redis.UniversalClient {
	rc := s.NewClient()
	t.Cleanup(func() { _ = rc.Close() })
	rc.AddHook(h)
	return rc
}

// An invalidation that arrives while the read that fills the near cache
// is in flight wins: the late reply is returned to its caller (it was
// true when read) but not kept, so the next call reads the new value.
func TestNear_invalidationDuringFillWins(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tc := range []struct {
			name   string
			writer func(a, b *cache.Cache) *cache.Cache // who writes during the fill
		}{
			{"another process writes", func(a, _ *cache.Cache) *cache.Cache { return a }},
			{"this process writes", func(_, b *cache.Cache) *cache.Cache { return b }},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := testCtx(t)
				opts := nearOpts(t)
				a := nearCache(t, s, opts)
				h := &fillHook{}
				rc := s.NewClient()
				t.Cleanup(func() { _ = rc.Close() })
				b := newCacheOn(t, rc, opts)
				cache.AddFillHook(b, rc, h)
				redistest.WaitFor(t, ctx, "near cache active", b.NearActive)
				setAndWait(t, ctx, a, b, "k", "v1")
				w := tc.writer(a, b)
				h.arm(func() {
					before := b.Stats().NearInvalidations
					if err := cache.Set(ctx, w, "k", "v2"); err != nil {
						t.Error(err)
						return
					}
					redistest.WaitFor(t, ctx, "the invalidation", func() bool { return b.Stats().NearInvalidations > before })
				})
				if v, err := cache.Get[string](ctx, b, "k"); err != nil || v != "v1" {
					t.Fatalf("the read in flight: Get = %q, %v; want v1 (read before the write)", v, err)
				}
				for range 3 {
					if v, err := cache.Get[string](ctx, b, "k"); err != nil || v != "v2" {
						t.Fatalf("after the write: Get = %q, %v; want v2 (the late reply must not be kept)", v, err)
					}
				}
				if b.Stats().NearHits == 0 {
					t.Fatal("no near hits: v2 was not kept either")
				}
			})
		}
	}, trackingKinds...)
}

// A tracking connection that is reset, or silent for longer than the
// lease, empties the near cache, and nothing is served from it until
// invalidations flow again; a write missed meanwhile is never served
// stale afterwards.
func TestNear_trackingConnectionFaults(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		type faults interface {
			Refuse()
			Reset() int
			BlackHole()
		}
		for _, tc := range []struct {
			name  string
			fault func(p faults)
			lost  bool // the connection ends: the near cache must be flushed
		}{
			{"reset", func(p faults) { p.Refuse(); p.Reset() }, true},
			// Held bytes arrive in order when the hole ends: the
			// invalidation comes before the pong that trusts the cache
			// again, so a flush is not needed (one follows if the hole
			// outlasts 3 leases and the connection is made again).
			{"black-holed", func(p faults) { p.BlackHole() }, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := testCtx(t)
				opts := nearOpts(t)
				opts.Near.Lease = 200 * time.Millisecond
				a := nearCache(t, s, opts)
				rc, faults := faultyClient(t, s, clientTimeouts{dial: time.Second, write: 100 * time.Millisecond, read: 100 * time.Millisecond, pool: time.Second})
				b := newCacheOn(t, rc, opts)
				redistest.WaitFor(t, ctx, "near cache active", b.NearActive)
				setAndWait(t, ctx, a, b, "k", "v1")
				for range 2 {
					if v, err := cache.Get[string](ctx, b, "k"); err != nil || v != "v1" {
						t.Fatalf("Get = %q, %v; want v1", v, err)
					}
				}
				st := b.Stats()
				if st.NearHits != 1 {
					t.Fatalf("NearHits %d; want 1", st.NearHits)
				}
				tc.fault(faults)
				if err := cache.Set(ctx, a, "k", "v2"); err != nil {
					t.Fatal(err)
				}
				redistest.WaitFor(t, ctx, "the near cache to stop answering", func() bool { return !b.NearActive() })
				// Nothing comes from the near cache now: the call goes to
				// the server, which b cannot reach.
				short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				v, err := cache.Get[string](short, b, "k")
				cancel()
				if err == nil {
					t.Fatalf("while tracking is down: Get = %q; want an error (no server), never the near cache's v1", v)
				}
				faults.Resume()
				redistest.WaitFor(t, ctx, "the near cache to answer again", b.NearActive)
				redistest.WaitFor(t, ctx, "the server reachable", func() bool {
					_, err := cache.Get[string](ctx, b, "k")
					return err == nil
				})
				for range 3 {
					if v, err := cache.Get[string](ctx, b, "k"); err != nil || v != "v2" {
						t.Fatalf("after the fault: Get = %q, %v; want v2", v, err)
					}
				}
				if after := b.Stats(); tc.lost && after.NearFlushes <= st.NearFlushes {
					t.Fatalf("NearFlushes %d, before the fault %d; want more", after.NearFlushes, st.NearFlushes)
				}
			})
		}
	}, trackingKinds...)
}

// A server restart loses the server's tracking table and the data: the
// near cache is emptied and the value loaded again, not served from the
// near cache.
func TestNear_serverRestart(t *testing.T) {
	for _, kind := range []redistest.Kind{redistest.Redis7, redistest.Redis8, redistest.Valkey} {
		t.Run(string(kind), func(t *testing.T) {
			s := redistest.Start(t, kind)
			ctx := testCtx(t)
			opts := nearOpts(t)
			opts.Near.Lease = 200 * time.Millisecond
			c := nearCache(t, s, opts)
			var calls atomic.Int64
			settle(t, ctx, c, func() {
				if v, err := cache.GetOrLoad(ctx, c, "k", constLoader("v1", &calls)); err != nil || v != "v1" {
					t.Fatalf("GetOrLoad = %q, %v; want v1", v, err)
				}
			})
			s.Kill()
			redistest.WaitFor(t, ctx, "the near cache to stop answering", func() bool { return !c.NearActive() })
			if err := s.Restart(); err != nil {
				t.Fatal(err)
			}
			redistest.WaitFor(t, ctx, "the near cache to answer again", c.NearActive)
			redistest.WaitFor(t, ctx, "a value after the restart", func() bool {
				v, err := cache.GetOrLoad(ctx, c, "k", constLoader("v2", &calls))
				if err == nil && v == "v1" {
					t.Fatal("v1 served after the restart: the server has no such value")
				}
				return err == nil && v == "v2"
			})
		})
	}
}

// A stale entry in the near caches of many processes triggers one
// refresh in the whole cluster, and the stale value is served meanwhile;
// once the refresh wrote, every process serves the new value.
func TestNear_staleRefreshOnceAcrossProcesses(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		clock := &skipClock{}
		opts := nearOpts(t)
		opts.Expiry.Stale = 10 * time.Minute
		opts.Now = clock.Now
		const procs, callers = 4, 16
		cs := make([]*cache.Cache, procs)
		var calls atomic.Int64
		for i := range cs {
			cs[i] = nearCache(t, s, opts)
			for range 2 { // the second call fills the near cache (or hits it)
				if v, err := cache.GetOrLoad(ctx, cs[i], "k", constLoader("v1", &calls)); err != nil || v != "v1" {
					t.Fatalf("GetOrLoad = %q, %v; want v1", v, err)
				}
			}
		}
		clock.Skip(2 * time.Minute)
		release := make(chan struct{})
		slow := func(context.Context) (string, error) {
			calls.Add(1)
			<-release
			return "v2", nil
		}
		var wg sync.WaitGroup
		for i := range procs * callers {
			wg.Go(func() {
				if v, err := cache.GetOrLoad(ctx, cs[i%procs], "k", slow); err != nil || v != "v1" {
					t.Errorf("while refreshing: GetOrLoad = %q, %v; want the stale v1", v, err)
				}
			})
		}
		wg.Wait()
		close(release)
		for _, c := range cs {
			redistest.WaitFor(t, ctx, "the refreshed value", func() bool {
				v, err := cache.GetOrLoad(ctx, c, "k", slow)
				return err == nil && v == "v2"
			})
		}
		if n := calls.Load(); n != 2 {
			t.Fatalf("loader calls %d; want 2 (the first load and one refresh)", n)
		}
		var near uint64
		for _, c := range cs {
			near += c.Stats().NearHits
		}
		if near == 0 {
			t.Fatal("no near hits: the test did not test the near cache")
		}
	}, trackingKinds...)
}

// A remembered not-found is served from the near cache while fresh.
func TestNear_notFound(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		opts := nearOpts(t)
		opts.Expiry.Negative = time.Minute
		c := nearCache(t, s, opts)
		var calls atomic.Int64
		missing := func(context.Context) (string, error) {
			calls.Add(1)
			return "", loader.ErrNotFound
		}
		get := func() {
			if _, err := cache.GetOrLoad(ctx, c, "k", missing); !errors.Is(err, loader.ErrNotFound) {
				t.Fatalf("GetOrLoad: %v; want ErrNotFound", err)
			}
		}
		settle(t, ctx, c, get)
		before := c.Stats().NearHits
		for range 3 {
			get()
		}
		if calls.Load() != 1 || c.Stats().NearHits != before+3 {
			t.Fatalf("loads %d, NearHits +%d; want 1 and +3", calls.Load(), c.Stats().NearHits-before)
		}
	}, trackingKinds...)
}

// A near hit allocates nothing: of a string or of a struct, with or
// without options (given as values made once, as callers keep them), with
// or without an Observer.
func TestNear_hitAllocations(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	var calls atomic.Int64
	load := constLoader("value", &calls)
	loadProfile := func(context.Context) (profile, error) {
		calls.Add(1)
		return sample, nil
	}
	opts := []cache.LoadOption{
		cache.WithExpiry(cache.Expiry{Fresh: time.Minute, Stale: time.Second}),
		cache.WithWaitTimeout(time.Second),
		cache.WithTags("t"),
	}
	isValue := func(v string, err error) error {
		if err == nil && v != "value" {
			err = errors.New("GetOrLoad = " + v + ", want value")
		}
		return err
	}
	var batcher *cache.Batcher[string] // made on the row's Cache
	observed := nearOpts(t)
	var events atomic.Int64
	observed.Observer = func(e cache.Event) {
		if e.Kind == cache.EventHit && e.Near {
			events.Add(1)
		}
	}
	tests := []struct {
		name string
		opts *cache.Options
		get  func(c *cache.Cache) error
	}{
		{"string", nearOpts(t), func(c *cache.Cache) error {
			return isValue(cache.GetOrLoad(ctx, c, "k", load))
		}},
		{"struct", nearOpts(t), func(c *cache.Cache) error {
			p, err := cache.GetOrLoad(ctx, c, "p", loadProfile)
			if err == nil && p.ID != sample.ID {
				err = errors.New("not the sample profile")
			}
			return err
		}},
		{"options", nearOpts(t), func(c *cache.Cache) error {
			return isValue(cache.GetOrLoad(ctx, c, "k", load, opts...))
		}},
		{"observer", observed, func(c *cache.Cache) error {
			return isValue(cache.GetOrLoad(ctx, c, "k", load))
		}},
		{"Batcher", nearOpts(t), func(c *cache.Cache) error {
			if batcher == nil {
				var err error
				batcher, err = cache.NewBatcher(c, func(_ context.Context, keys []string) (map[string]string, error) {
					calls.Add(1)
					m := make(map[string]string, len(keys))
					for _, k := range keys {
						m[k] = "value"
					}
					return m, nil
				}, nil)
				if err != nil {
					return err
				}
			}
			return isValue(batcher.Get(ctx, "b"))
		}},
		{"Get", nearOpts(t), func(c *cache.Cache) error {
			v, err := cache.Get[string](ctx, c, "g")
			if errors.Is(err, cache.ErrMiss) {
				return cache.Set(ctx, c, "g", "value") // the first call
			}
			return isValue(v, err)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := nearCache(t, s, tt.opts)
			settle(t, ctx, c, func() {
				if err := tt.get(c); err != nil {
					t.Fatal(err)
				}
			})
			before := c.Stats().NearHits
			allocs := testing.AllocsPerRun(100, func() {
				if err := tt.get(c); err != nil {
					t.Fatal(err)
				}
			})
			if hits := c.Stats().NearHits - before; hits < 100 {
				t.Fatalf("%d near hits in 101 calls; the near cache was not used", hits)
			}
			if allocs != 0 {
				t.Fatalf("%v allocations per near hit; want 0", allocs)
			}
		})
	}
	if events.Load() == 0 {
		t.Fatal("the Observer was told of no near hit")
	}
}

// getCounter counts GETs and GET pipelines sent, delaying each by a
// millisecond as a network round trip would.
type getCounter struct{ gets atomic.Int64 }

func (h *getCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) { return next(ctx, network, addr) }
}

func (h *getCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "get" {
			h.gets.Add(1)
			time.Sleep(time.Millisecond) // the round trip being shared, not synchronisation
		}
		return next(ctx, cmd)
	}
}

func (h *getCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Without the near cache, concurrent callers of a hot key share GETs:
// far fewer GETs than calls. The callers of a shared GET share its
// decoded value too: at most one decode per GET.
func TestGetOrLoad_hotKeySharesReads(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	h := &getCounter{}
	var decodes atomic.Int64
	c := newCacheOn(t, hookedClient(t, s, h), &cache.Options{Namespace: namespace(t), Codec: countingCodec{&decodes}})
	var calls atomic.Int64
	load := constLoader("v", &calls)
	if _, err := cache.GetOrLoad(ctx, c, "k", load); err != nil {
		t.Fatal(err)
	}
	const goroutines, each = 32, 50
	before, decodes0 := h.gets.Load(), decodes.Load()
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				if v, err := cache.GetOrLoad(ctx, c, "k", load); err != nil || v != "v" {
					t.Errorf("GetOrLoad = %q, %v", v, err)
					return
				}
			}
		})
	}
	wg.Wait()
	gets, decoded := h.gets.Load()-before, decodes.Load()-decodes0
	t.Logf("%d calls sent %d GETs and decoded %d values", goroutines*each, gets, decoded)
	if gets > goroutines*each/4 {
		t.Fatalf("%d GETs for %d calls; want at most a quarter", gets, goroutines*each)
	}
	if decoded > gets {
		t.Errorf("%d decodes for %d GETs; want at most one per GET", decoded, gets)
	}
	if calls.Load() != 1 {
		t.Fatalf("loads %d; want 1", calls.Load())
	}
}
