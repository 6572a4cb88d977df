package cache_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/faultproxy"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/redis/go-redis/v9"
)

// TestGetOrLoad_panickingLoader: a panic reaches every concurrent caller as
// a *loader.PanicError (and a waiter in another Cache as ErrRemoteLoad),
// the claim is released, and the next call loads at once.
func TestGetOrLoad_panickingLoader(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		rc := s.Client(t)
		a := newCacheOn(t, rc, &cache.Options{Namespace: ns})
		b := newCacheOn(t, rc, &cache.Options{Namespace: ns, PollInterval: 10 * time.Second, WaitTimeout: 20 * time.Second})
		boom := errors.New("boom")
		started := make(chan struct{})
		release, open := gate(t)
		var loads atomic.Int32
		panicky := func(ctx context.Context) (int, error) {
			if loads.Add(1) == 1 {
				close(started)
			}
			select {
			case <-release:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			panic(boom)
		}
		const callers = 8
		results := []<-chan result[int]{goGetOrLoad(ctx, a, "k", panicky)}
		redistest.Recv(t, ctx, started, "the load to start")
		for range callers - 1 {
			results = append(results, goGetOrLoad(ctx, a, "k", panicky))
		}
		var bLoads atomic.Int32
		remote := goGetOrLoad(ctx, b, "k", neverLoad[int](&bLoads))
		// Subscribed before its read, so the failure's notice reaches it (a
		// waiter subscribed only after the failure finds the key free and
		// loads: docs/cache.md says the key does not keep a failed load's
		// error).
		redistest.WaitFor(t, ctx, "the other cache to wait, subscribed", func() bool { return cache.CoveredWaits(b) > 0 })
		redistest.WaitFor(t, ctx, "the callers to join", func() bool { return a.Stats().Misses == callers })
		open()

		for i, ch := range results {
			r := redistest.Recv(t, ctx, ch, fmt.Sprintf("caller %d", i))
			var pe *loader.PanicError
			if !errors.As(r.err, &pe) || pe.Value != boom || !errors.Is(r.err, boom) || len(pe.Stack) == 0 {
				t.Errorf("caller %d: %d, %v; want a *loader.PanicError carrying boom and a stack", i, r.v, r.err)
			}
		}
		r := redistest.Recv(t, ctx, remote, "the other cache")
		if !errors.Is(r.err, cache.ErrRemoteLoad) || !strings.Contains(r.err.Error(), "boom") || bLoads.Load() != 0 {
			t.Errorf("other cache: %v (%d own loads); want ErrRemoteLoad naming boom", r.err, bLoads.Load())
		}
		if n, err := rc.Exists(ctx, valueKey(ns, "k")).Result(); err != nil || n != 0 {
			t.Errorf("claim left behind after the panic: EXISTS = %d, %v", n, err)
		}

		before := a.Stats()
		if v, err := cache.GetOrLoad(ctx, a, "k", func(context.Context) (int, error) { return 7, nil }); err != nil || v != 7 {
			t.Fatalf("call after the panic: %d, %v", v, err)
		}
		after := a.Stats()
		if after.Loads != before.Loads+1 || after.Waits != 0 || after.LockContention != 0 {
			t.Errorf("stats after the panic %+v, before %+v; want one more load and no wait", after, before)
		}
	})
}

// TestGetOrLoad_noStaleSet: a rebuild that raced a Delete or a Set does
// not overwrite it; its caller still gets the loaded value.
func TestGetOrLoad_noStaleSet(t *testing.T) {
	tests := []struct {
		name    string
		stale   bool                                      // rebuild is a stale refresh, not a miss
		meddle  func(context.Context, *cache.Cache) error // runs while the loader is blocked
		wantGet func(t *testing.T, v string, err error)   // what Get returns afterwards
	}{
		{
			name:   "delete during load",
			meddle: func(ctx context.Context, c *cache.Cache) error { return c.Delete(ctx, "k") },
			wantGet: func(t *testing.T, v string, err error) {
				if !errors.Is(err, cache.ErrMiss) {
					t.Errorf("Get after Delete = %q, %v; want ErrMiss", v, err)
				}
			},
		},
		{
			name:   "set during load",
			meddle: func(ctx context.Context, c *cache.Cache) error { return cache.Set(ctx, c, "k", "set") },
			wantGet: func(t *testing.T, v string, err error) {
				if err != nil || v != "set" {
					t.Errorf("Get after Set = %q, %v; want set", v, err)
				}
			},
		},
		{
			name:   "delete during stale refresh",
			stale:  true,
			meddle: func(ctx context.Context, c *cache.Cache) error { return c.Delete(ctx, "k") },
			wantGet: func(t *testing.T, v string, err error) {
				if !errors.Is(err, cache.ErrMiss) {
					t.Errorf("Get after Delete = %q, %v; want ErrMiss", v, err)
				}
			},
		},
		{
			name:   "set during stale refresh",
			stale:  true,
			meddle: func(ctx context.Context, c *cache.Cache) error { return cache.Set(ctx, c, "k", "set") },
			wantGet: func(t *testing.T, v string, err error) {
				if err != nil || v != "set" {
					t.Errorf("Get after Set = %q, %v; want set", v, err)
				}
			},
		},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testCtx(t)
				clk := newClock()
				ns := namespace(t)
				rc := s.Client(t)
				c := newCacheOn(t, rc, &cache.Options{Namespace: ns, Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute}, Now: clk.Now})
				reader := newCacheOn(t, rc, &cache.Options{Namespace: ns, Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute}, Now: clk.Now})
				if tt.stale {
					if _, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) { return "old", nil }); err != nil {
						t.Fatal(err)
					}
					clk.Advance(2 * time.Minute)
				}
				started := make(chan struct{})
				release, open := gate(t)
				load := func(context.Context) (string, error) {
					close(started)
					<-release // ignores ctx: Close below must not stop it
					return "loaded", nil
				}
				res := goGetOrLoad(ctx, c, "k", load)
				want := "loaded"
				if tt.stale {
					want = "old"
					if r := redistest.Recv(t, ctx, res, "the stale value"); r.err != nil || r.v != "old" {
						t.Fatalf("stale call: %q, %v", r.v, r.err)
					}
				}
				redistest.Recv(t, ctx, started, "the load to start")
				if err := tt.meddle(ctx, c); err != nil {
					t.Fatal(err)
				}
				open()
				if !tt.stale {
					if r := redistest.Recv(t, ctx, res, "the loading caller"); r.err != nil || r.v != want {
						t.Errorf("loading caller got %q, %v; want %q", r.v, r.err, want)
					}
				}
				_ = c.Close() // waits for the rebuild's write (or its skip)
				v, err := cache.Get[string](ctx, reader, "k")
				tt.wantGet(t, v, err)
				if st := c.Stats(); st.WritesSkipped != 1 {
					t.Errorf("stats = %+v; want 1 write skipped", st)
				}
				if n, err := rc.Exists(ctx, valueKey(ns, "k")+":lock").Result(); err != nil || n != 0 {
					t.Errorf("rebuild lock left behind: EXISTS = %d, %v", n, err)
				}
			})
		}
	})
}

// TestGetOrLoad_loadedValueTooLarge: a loaded value above MaxValueSize is
// returned as ErrValueTooLarge and not stored; the claim is freed.
func TestGetOrLoad_loadedValueTooLarge(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		c, rc := newCache(t, s, &cache.Options{Namespace: ns, MaxValueSize: 64})
		_, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) { return strings.Repeat("x", 100), nil })
		if !errors.Is(err, cache.ErrValueTooLarge) {
			t.Errorf("err = %v, want ErrValueTooLarge", err)
		}
		if n, err := rc.Exists(ctx, valueKey(ns, "k")).Result(); err != nil || n != 0 {
			t.Errorf("EXISTS = %d, %v; want nothing stored, no claim left", n, err)
		}
		if v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) { return "small", nil }); err != nil || v != "small" {
			t.Errorf("next call: %q, %v", v, err)
		}
	})
}

// When the write after a load fails because the server stopped answering,
// the rebuilder does not also wait out a timeout to announce the result:
// its callers get the value after one timeout, and waiters elsewhere
// find the result by polling.
func TestGetOrLoad_noAnnouncementAfterFailedWrite(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	p, err := faultproxy.Start(s.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	rc := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rc.Close() })
	rec := record(rc)
	c := newCacheOn(t, rc, &cache.Options{FailOpenCooldown: time.Minute})
	// A first load settles the capability probe, so the one below writes
	// straight away.
	if _, err := cache.GetOrLoad(ctx, c, "warm", func(context.Context) (string, error) { return "w", nil }); err != nil {
		t.Fatal(err)
	}
	rec.reset()
	v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) {
		p.BlackHole() // everything after the load meets a dead server
		return "loaded", nil
	})
	if err != nil || v != "loaded" {
		t.Fatalf("GetOrLoad = %q, %v; want the loaded value", v, err)
	}
	var names []string
	for _, cmd := range rec.reset() {
		names = append(names, cmd[0])
	}
	if slices.Contains(names, "publish") {
		t.Errorf("commands %v: an announcement was attempted after the write failed", names)
	}
	if st := c.Stats(); st.ServerErrors == 0 {
		t.Errorf("stats %+v: the failed write was not counted", st)
	}
}
