package cache_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/loader"
)

// nearOpts returns options with a near cache, in the test's namespace.
func nearOpts(tb testing.TB) *cache.Options {
	return &cache.Options{Namespace: namespace(tb), TTL: time.Minute, Near: &cache.Near{MaxEntries: 1000}}
}

// nearCache returns a Cache with a near cache on s, with a client of its
// own (standing in for a process), once the near cache is active.
func nearCache(t *testing.T, s *redistest.Server, opts *cache.Options) *cache.Cache {
	t.Helper()
	rc := s.NewClient()
	t.Cleanup(func() { _ = rc.Close() }) // after the Cache's Close: cleanups run last first
	c := newCacheOn(t, rc, opts)
	if s.Kind == redistest.Miniredis {
		return c
	}
	redistest.WaitFor(t, testCtx(t), "near cache active", c.NearActive)
	return c
}

// settle calls get until two calls in a row are near hits with no
// invalidation between them. A process's own writes (a load's claim and
// value) are invalidated by the server too, and those invalidations may
// arrive after the next read filled the near cache, dropping it once more;
// tests that count near hits exactly start from a settled near cache.
func settle(t *testing.T, ctx context.Context, c *cache.Cache, get func()) {
	t.Helper()
	redistest.WaitFor(t, ctx, "a settled near cache", func() bool {
		before := c.Stats()
		get()
		get()
		after := c.Stats()
		return after.NearInvalidations == before.NearInvalidations && after.NearHits == before.NearHits+2
	})
}

func constLoader(v string, calls *atomic.Int64) loader.Func[string] {
	return func(context.Context) (string, error) {
		calls.Add(1)
		return v, nil
	}
}

// Hits after the first read come from the near cache, and a Set in
// another process reaches this one: it stops serving the old value.
func TestNear_hitsAndInvalidation(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		opts := nearOpts(t)
		a := nearCache(t, s, opts)
		b := nearCache(t, s, opts)
		var calls atomic.Int64
		if s.Kind == redistest.Miniredis {
			if err := cache.Set(ctx, a, "k", "v1"); err != nil {
				t.Fatal(err)
			}
		} else {
			setAndWait(t, ctx, a, b, "k", "v1")
		}
		for range 5 {
			v, err := cache.GetOrLoad(ctx, b, "k", constLoader("loaded", &calls))
			if err != nil || v != "v1" {
				t.Fatalf("GetOrLoad = %q, %v; want v1", v, err)
			}
		}
		st := b.Stats()
		if s.Kind == redistest.Miniredis {
			// No CLIENT TRACKING: the near cache stays off.
			if b.NearActive() || st.NearHits != 0 || st.Hits != 5 {
				t.Fatalf("miniredis: NearActive %v, NearHits %d, Hits %d; want off, 0, 5", b.NearActive(), st.NearHits, st.Hits)
			}
			return
		}
		// The first call reads the server and fills the near cache, the
		// other four are near hits.
		if st.NearHits != 4 || st.Hits != 5 || calls.Load() != 0 || st.NearEntries != 1 {
			t.Fatalf("NearHits %d Hits %d loads %d NearEntries %d; want 4, 5, 0, 1", st.NearHits, st.Hits, calls.Load(), st.NearEntries)
		}
		before := b.Stats().NearInvalidations
		if err := cache.Set(ctx, a, "k", "v2"); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, ctx, "b invalidated", func() bool { return b.Stats().NearInvalidations > before })
		v, err := cache.GetOrLoad(ctx, b, "k", constLoader("v3", &calls))
		if err != nil || v != "v2" {
			t.Fatalf("after Set elsewhere: GetOrLoad = %q, %v; want v2", v, err)
		}
		// Delete in a: b must load again.
		before = b.Stats().NearInvalidations
		if err := a.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, ctx, "b invalidated again", func() bool { return b.Stats().NearInvalidations > before })
		v, err = cache.GetOrLoad(ctx, b, "k", constLoader("v4", &calls))
		if err != nil || v != "v4" {
			t.Fatalf("after Delete elsewhere: GetOrLoad = %q, %v; want v4", v, err)
		}
	})
}

// Read-your-writes in one process: after Set or Delete returns, the old
// value is never served from the near cache, invalidation or not.
func TestNear_readYourWrites(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c := nearCache(t, s, nearOpts(t))
		var calls atomic.Int64
		for i := range 50 {
			want := string(rune('a' + i%26))
			if err := cache.Set(ctx, c, "k", want); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				v, err := cache.GetOrLoad(ctx, c, "k", constLoader("loaded", &calls))
				if err != nil || v != want {
					t.Fatalf("round %d: GetOrLoad = %q, %v; want %q", i, v, err, want)
				}
			}
			if err := c.Delete(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if _, err := cache.Get[string](ctx, c, "k"); !errors.Is(err, cache.ErrMiss) {
				t.Fatalf("round %d: Get after Delete: %v; want ErrMiss", i, err)
			}
		}
		if s.Kind != redistest.Miniredis && c.Stats().NearHits == 0 {
			t.Fatal("no near hits: the test did not test the near cache")
		}
	})
}
