package cache_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/engine"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// TestEngine_failedWriteDrops: every write of a key that fails, Set and
// Delete and Engine's conditional ones (the middleware stores revalidated
// pages with SetIfUnchanged and drops purged ones with
// DeleteIfUnchanged), ends the same way: it may have reached the server
// all the same, so the key is dropped from this process's near cache, and
// it counts as one server error, told to the Observer with its key.
func TestEngine_failedWriteDrops(t *testing.T) {
	writes := []struct {
		name  string
		write func(ctx context.Context, c *cache.Cache, old []byte) error
	}{
		{"Set", func(ctx context.Context, c *cache.Cache, _ []byte) error { return cache.Set(ctx, c, "k", "new") }},
		{"Delete", func(ctx context.Context, c *cache.Cache, _ []byte) error { return c.Delete(ctx, "k") }},
		{"SetIfUnchanged", func(ctx context.Context, c *cache.Cache, old []byte) error {
			return engine.Of(c).SetIfUnchanged(ctx, "k", "new", old, time.Minute, 0)
		}},
		{"DeleteIfUnchanged", func(ctx context.Context, c *cache.Cache, old []byte) error {
			return engine.Of(c).DeleteIfUnchanged(ctx, "k", old)
		}},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		near := s.Kind != redistest.Miniredis // which has no CLIENT TRACKING
		for _, w := range writes {
			t.Run(w.name, func(t *testing.T) {
				ctx := testCtx(t)
				rc, faults := faultyClient(t, s, clientTimeouts{dial: time.Second, write: time.Second, read: 300 * time.Millisecond, pool: time.Second})
				var mu sync.Mutex
				var failed []cache.Event // EventServerError
				opts := &cache.Options{Namespace: namespace(t), Observer: func(e cache.Event) {
					if e.Kind == cache.EventServerError {
						mu.Lock()
						failed = append(failed, e)
						mu.Unlock()
					}
				}}
				if near {
					// A Lease far longer than the test: the near cache
					// keeps its trust through the black hole, so that only
					// the write can drop the entry.
					opts.Near = &cache.Near{MaxEntries: 100, Lease: time.Minute}
				}
				c := newCacheOn(t, rc, opts)
				if err := cache.Set(ctx, c, "k", "old"); err != nil {
					t.Fatal(err)
				}
				// The conditional writes probe the server on first use:
				// done now, so that the fault meets the write itself.
				if _, err := c.Capabilities(ctx); err != nil {
					t.Fatal(err)
				}
				if near {
					redistest.WaitFor(t, ctx, "a near hit", func() bool {
						v, err := cache.Get[string](ctx, c, "k")
						return err == nil && v == "old" && c.Stats().NearHits > 0
					})
				}
				old := peekRaw(t, ctx, c)
				before := c.Stats()

				faults.BlackHole()
				defer faults.Resume()
				err := w.write(ctx, c, old)
				if err == nil || errors.Is(err, engine.ErrChanged) {
					t.Fatalf("%s through a black hole: %v; want its failure", w.name, err)
				}
				if n := c.Stats().ServerErrors - before.ServerErrors; n != 1 {
					t.Errorf("the failed %s counted %d server errors; want 1", w.name, n)
				}
				mu.Lock()
				if len(failed) != 1 || failed[0].Key != "k" || failed[0].Err == nil {
					t.Errorf("the failed %s told the Observer %+v; want one server error of k", w.name, failed)
				}
				mu.Unlock()
				if !near {
					return
				}
				if v, err := cache.Get[string](ctx, c, "k"); err == nil && v == "old" {
					t.Errorf("Get after the failed %s: %q from the near cache", w.name, v)
				}
			})
		}
	}, redistest.Redis8, redistest.Valkey, redistest.Miniredis)
}
