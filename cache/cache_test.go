package cache_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
)

type user struct {
	ID   int
	Name string
}

func TestGetOrLoad_missThenHit(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newCache(t, s, nil)
		var loads atomic.Int32
		load := func(context.Context) (user, error) {
			loads.Add(1)
			return user{7, "ada"}, nil
		}
		for i := range 3 {
			u, err := cache.GetOrLoad(ctx, c, "user:7", load)
			if err != nil || u != (user{7, "ada"}) {
				t.Fatalf("call %d: %+v, %v", i, u, err)
			}
		}
		if n := loads.Load(); n != 1 {
			t.Errorf("%d loads, want 1", n)
		}
		st := c.Stats()
		if st.Hits != 2 || st.Misses != 1 || st.Loads != 1 {
			t.Errorf("stats = %+v, want 2 hits, 1 miss, 1 load", st)
		}
		got, err := cache.Get[user](ctx, c, "user:7")
		if err != nil || got.Name != "ada" {
			t.Errorf("Get = %+v, %v", got, err)
		}
	})
}

// TestGetOrLoad_coalescesAcrossCaches: several Cache instances (as in
// several processes) and many goroutines each, one absent key: one load.
func TestGetOrLoad_coalescesAcrossCaches(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		rc := s.Client(t)
		const caches, goroutines = 4, 16
		var loads atomic.Int32
		release := make(chan struct{})
		load := func(ctx context.Context) (string, error) {
			loads.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
				return "", ctx.Err()
			}
			return "v", nil
		}
		errs := make(chan error, caches*goroutines)
		var wg sync.WaitGroup
		var cs []*cache.Cache
		for range caches {
			cs = append(cs, newCacheOn(t, rc, &cache.Options{Namespace: ns}))
		}
		for _, c := range cs {
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					v, err := cache.GetOrLoad(ctx, c, "hot", load)
					if err == nil && v != "v" {
						err = errors.New("wrong value " + v)
					}
					errs <- err
				}()
			}
		}
		// Wait until one load runs, then let it finish.
		redistest.WaitFor(t, ctx, "a load to start", func() bool { return loads.Load() > 0 })
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		if n := loads.Load(); n != 1 {
			t.Errorf("%d loads, want 1", n)
		}
	})
}

func TestGetOrLoad_loaderError(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newCache(t, s, nil)
		boom := errors.New("boom")
		_, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (int, error) { return 0, boom })
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v, want boom", err)
		}
		// Not cached: the next call loads again.
		v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (int, error) { return 5, nil })
		if err != nil || v != 5 {
			t.Fatalf("after an error: %d, %v", v, err)
		}
	})
}

func TestStats_Add(t *testing.T) {
	a := cache.Stats{Hits: 1, StaleHits: 2, Misses: 3, Loads: 4, LoadErrors: 5, Coalesced: 6, Waits: 7,
		WaitTimeouts: 8, LockContention: 9, FailOpenLoads: 10, DecodeFailures: 11, Refreshes: 12, WritesSkipped: 13, ServerErrors: 14}
	want := cache.Stats{Hits: 2, StaleHits: 4, Misses: 6, Loads: 8, LoadErrors: 10, Coalesced: 12, Waits: 14,
		WaitTimeouts: 16, LockContention: 18, FailOpenLoads: 20, DecodeFailures: 22, Refreshes: 24, WritesSkipped: 26, ServerErrors: 28}
	if got := a.Add(a); got != want {
		t.Fatalf("Add = %+v, want %+v", got, want)
	}
	if got := a.Add(cache.Stats{}); got != a {
		t.Fatalf("Add of zero = %+v, want %+v", got, a)
	}
}
