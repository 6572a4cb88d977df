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
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/lock"
)

// TestSoftInvalidate_staleWhileOneRefreshes: a value soft-invalidated in
// one process is served stale at once by every process while exactly one
// of them refreshes it, keeps the time to live it had on the server, and
// is replaced by the refresh. The value has no stale window of its own
// (Expiry.Stale 0): the invalidation gives it one. A large value's
// conditional write compares a digest.
func TestSoftInvalidate_staleWhileOneRefreshes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, size := range []int{16, 10 << 10} {
			t.Run(fmt.Sprintf("%dB", size), func(t *testing.T) {
				ctx := testCtx(t)
				clk := newClock()
				opts := cache.Options{Namespace: namespace(t), Expiry: cache.ExpiryPolicy{Fresh: time.Hour}, Now: clk.Now}
				const n = 3
				var cs []*cache.Cache
				var recs []*recorder
				for range n {
					rc := s.Client(t)
					recs = append(recs, record(rc))
					cs = append(cs, newCacheOn(t, rc, &opts))
				}
				old, next := randomString(t, size), randomString(t, size)
				if err := cache.Set(ctx, cs[0], "k", old); err != nil {
					t.Fatal(err)
				}
				rc := s.Client(t)
				vk := valueKey(opts.Namespace, "k")
				before, err := rc.PTTL(ctx, vk).Result()
				if err != nil || before <= 0 {
					t.Fatalf("PTTL before = %v, %v", before, err)
				}
				if err := cs[2].SoftInvalidate(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				after, err := rc.PTTL(ctx, vk).Result()
				if err != nil || after <= 0 || after > before {
					t.Fatalf("PTTL after = %v, %v; want the %v it had kept (not more, not none)", after, err, before)
				}
				if v, err := cache.Get[string](ctx, cs[1], "k"); v != old || !errors.Is(err, cache.ErrStale) {
					t.Fatalf("Get after SoftInvalidate = %.20q, %v; want the old value with ErrStale", v, err)
				}

				started := make(chan struct{})
				release, open := gate(t)
				var loads atomic.Int32
				refresh := func(ctx context.Context) (string, error) {
					if loads.Add(1) == 1 {
						close(started)
					}
					select {
					case <-release:
						return next, nil
					case <-ctx.Done():
						return "", ctx.Err()
					}
				}
				lockKey := vk + ":lock"
				announced := signalAnnounced(recs[0], opts.Namespace, "k")
				var tried []<-chan struct{}
				for _, r := range recs[1:] {
					tried = append(tried, r.signalOn("set", lockKey))
				}
				for i, c := range cs {
					v, err := cache.GetOrLoad(ctx, c, "k", refresh)
					if err != nil || v != old {
						t.Fatalf("cache %d after SoftInvalidate: %.20q, %v; want the old value at once", i, v, err)
					}
					if i == 0 {
						redistest.Recv(t, ctx, started, "the refresh to start")
					} else {
						redistest.Recv(t, ctx, tried[i-1], fmt.Sprintf("cache %d to try the refresh lock", i))
					}
				}
				open()
				redistest.Recv(t, ctx, announced, "the refresh to write and announce")
				for i, c := range cs {
					if v, err := cache.GetOrLoad(ctx, c, "k", refresh); err != nil || v != next {
						t.Errorf("cache %d after the refresh: %.20q, %v; want the new value", i, v, err)
					}
				}
				if got := loads.Load(); got != 1 {
					t.Errorf("loads = %d, want exactly 1 across %d caches", got, n)
				}
			})
		}
	})
}

// TestSoftInvalidate_refreshInProgressLoses: a refresh that began before
// the invalidation does not store its result: the value stays the one
// invalidated, stale.
func TestSoftInvalidate_refreshInProgressLoses(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		clk := newClock()
		opts := cache.Options{Namespace: namespace(t), Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: time.Hour}, Now: clk.Now}
		rc0 := s.Client(t)
		rec := record(rc0)
		a := newCacheOn(t, rc0, &opts)
		b := newCacheOn(t, s.Client(t), &opts)
		if err := cache.Set(ctx, a, "k", "old"); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Minute) // stale: the next read refreshes
		vk := valueKey(opts.Namespace, "k")
		wrote := make(chan struct{}, 1)
		rec.onAfter(func(args []string, _ error) {
			// The refresh's conditional write: SET … IFEQ/IFDEQ, or the
			// script (EVALSHA sha 1 key …).
			if args[0] == "set" && len(args) > 3 && args[1] == vk && slices.Contains(args, "IFEQ") ||
				args[0] == "set" && args[1] == vk && slices.Contains(args, "IFDEQ") ||
				strings.HasPrefix(args[0], "eval") && len(args) > 3 && args[3] == vk {
				select {
				case wrote <- struct{}{}:
				default:
				}
			}
		})
		started := make(chan struct{})
		release, open := gate(t)
		if v, err := cache.GetOrLoad(ctx, a, "k", heldLoader(started, release, "refreshed")); err != nil || v != "old" {
			t.Fatalf("GetOrLoad while stale = %q, %v; want old", v, err)
		}
		redistest.Recv(t, ctx, started, "the refresh to start")
		if err := b.SoftInvalidate(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		open()
		redistest.Recv(t, ctx, wrote, "the refresh's conditional write")
		if v, err := cache.Get[string](ctx, b, "k"); v != "old" || !errors.Is(err, cache.ErrStale) {
			t.Errorf("Get after the refresh = %q, %v; want old with ErrStale: the refresh began before the invalidation", v, err)
		}
	})
}

// TestSoftInvalidate_claimInProgressNotStored: a load on a miss (its
// claim where the value goes) that began before the invalidation is not
// stored; its caller still gets its value.
func TestSoftInvalidate_claimInProgressNotStored(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		opts := cache.Options{Namespace: namespace(t), Expiry: cache.ExpiryPolicy{Fresh: time.Hour}}
		a := newCacheOn(t, s.Client(t), &opts)
		b := newCacheOn(t, s.Client(t), &opts)
		started := make(chan struct{})
		release, open := gate(t)
		got := goGetOrLoad(ctx, a, "k", heldLoader(started, release, "loaded"))
		redistest.Recv(t, ctx, started, "the load to start")
		if err := b.SoftInvalidate(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		open()
		r := redistest.Recv(t, ctx, got, "the load's result")
		if r.err != nil || r.v != "loaded" {
			t.Fatalf("GetOrLoad = %q, %v; want its own load's value", r.v, r.err)
		}
		if v, err := cache.Get[string](ctx, b, "k"); !errors.Is(err, cache.ErrMiss) {
			t.Errorf("Get = %q, %v; want ErrMiss: the load began before the invalidation", v, err)
		}
	})
}

// TestSoftInvalidate_nearCaches: another process's near cache stops
// serving its copy as fresh: the server's tracking invalidation drops it,
// and the next read finds the value stale.
func TestSoftInvalidate_nearCaches(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		if s.Kind == redistest.Miniredis {
			t.Skip("miniredis has no client tracking")
		}
		ctx := testCtx(t)
		opts := nearOpts(t)
		a := nearCache(t, s, opts)
		b := nearCache(t, s, opts)
		setAndWait(t, ctx, a, b, "k", "v")
		settle(t, ctx, b, func() { _, _ = cache.Get[string](ctx, b, "k") })
		before := b.Stats().NearInvalidations
		if err := a.SoftInvalidate(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, ctx, "b's copy invalidated", func() bool { return b.Stats().NearInvalidations > before })
		if v, err := cache.Get[string](ctx, b, "k"); v != "v" || !errors.Is(err, cache.ErrStale) {
			t.Errorf("Get in b = %q, %v; want v with ErrStale", v, err)
		}
		if v, err := cache.Get[string](ctx, a, "k"); v != "v" || !errors.Is(err, cache.ErrStale) {
			t.Errorf("Get in a = %q, %v; want v with ErrStale", v, err)
		}
	})
}

// TestSoftInvalidate_notFound: a remembered not-found becomes an expired
// one, which the next GetOrLoad loads again; several keys, one of them
// absent, are invalidated together.
func TestSoftInvalidate_notFound(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		opts := cache.Options{Namespace: namespace(t), Expiry: cache.ExpiryPolicy{Fresh: time.Hour, Negative: time.Hour}}
		c := newCacheOn(t, s.Client(t), &opts)
		var loads atomic.Int32
		load := func(context.Context) (string, error) {
			if loads.Add(1) == 1 {
				return "", loader.ErrNotFound
			}
			return "found", nil
		}
		if _, err := cache.GetOrLoad(ctx, c, "nf", load); !errors.Is(err, loader.ErrNotFound) {
			t.Fatalf("first GetOrLoad: %v; want ErrNotFound", err)
		}
		if _, err := cache.GetOrLoad(ctx, c, "nf", load); !errors.Is(err, loader.ErrNotFound) || loads.Load() != 1 {
			t.Fatalf("second GetOrLoad: %v after %d loads; want the remembered not-found", err, loads.Load())
		}
		if err := cache.Set(ctx, c, "v", "value"); err != nil {
			t.Fatal(err)
		}
		if err := c.SoftInvalidate(ctx, "nf", "absent", "v"); err != nil {
			t.Fatal(err)
		}
		if v, err := cache.GetOrLoad(ctx, c, "nf", load); err != nil || v != "found" {
			t.Errorf("GetOrLoad after SoftInvalidate = %q, %v; want a new load's value", v, err)
		}
		if v, err := cache.Get[string](ctx, c, "v"); v != "value" || !errors.Is(err, cache.ErrStale) {
			t.Errorf("Get of the value beside it = %q, %v; want it stale", v, err)
		}
		if _, err := cache.Get[string](ctx, c, "absent"); !errors.Is(err, cache.ErrMiss) {
			t.Errorf("Get of the absent key = %v; want ErrMiss", err)
		}
	})
}

// TestSoftInvalidate_invalid: the errors of Delete, before any server
// call.
func TestSoftInvalidate_invalid(t *testing.T) {
	ctx := testCtx(t)
	rc, rec := deadClient(t)
	c := newCacheOn(t, rc, nil)
	rec.reset()
	var nilCache *cache.Cache
	if err := nilCache.SoftInvalidate(ctx, "k"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("nil Cache: %v; want ErrInvalid", err)
	}
	if err := c.SoftInvalidate(ctx, "k", ""); !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), "empty key") {
		t.Errorf("empty key: %v; want ErrInvalid naming the empty key", err)
	}
	if cmds := rec.reset(); len(cmds) != 0 {
		t.Errorf("commands sent for bad input: %q", cmds)
	}
	c.Close()
	if err := c.SoftInvalidate(ctx, "k"); !errors.Is(err, cache.ErrClosed) {
		t.Errorf("closed Cache: %v; want ErrClosed", err)
	}
}

// A soft invalidation is stale for every reader, also one whose clock
// lags the invalidating process's (a process on another machine, or the
// near cache's coarse clock, which the robustness suite caught serving a
// just soft-purged page as fresh from the near cache).
func TestSoftInvalidate_laggingClock(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		a := newCacheOn(t, s.Client(t), &cache.Options{Namespace: ns})
		lag := func() time.Time { return time.Now().Add(-time.Minute) }
		b := newCacheOn(t, s.Client(t), &cache.Options{Namespace: ns, Now: lag})
		if err := cache.Set(ctx, a, "k", "v"); err != nil {
			t.Fatal(err)
		}
		if err := a.SoftInvalidate(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		for name, c := range map[string]*cache.Cache{"the invalidating process": a, "a process a minute behind": b} {
			if v, err := cache.Get[string](ctx, c, "k"); !errors.Is(err, cache.ErrStale) || v != "v" {
				t.Errorf("%s: Get = %q, %v; want v, ErrStale", name, v, err)
			}
		}
	})
}
