package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// TestNear_failedWriteDrops: a Set or Delete that fails with a timeout
// may have reached the server all the same, so it drops the key from this
// process's near cache too: the next Get does not answer with the value
// the write meant to replace.
func TestNear_failedWriteDrops(t *testing.T) {
	writes := []struct {
		name  string
		write func(ctx context.Context, c *cache.Cache) error
	}{
		{"Set", func(ctx context.Context, c *cache.Cache) error { return cache.Set(ctx, c, "k", "new") }},
		{"Delete", func(ctx context.Context, c *cache.Cache) error { return c.Delete(ctx, "k") }},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, w := range writes {
			t.Run(w.name, func(t *testing.T) {
				ctx := testCtx(t)
				rc, faults := faultyClient(t, s, clientTimeouts{dial: time.Second, write: time.Second, read: 300 * time.Millisecond, pool: time.Second})
				c := newCacheOn(t, rc, &cache.Options{Near: &cache.Near{MaxEntries: 100}})
				if err := cache.Set(ctx, c, "k", "old"); err != nil {
					t.Fatal(err)
				}
				redistest.WaitFor(t, ctx, "a near hit", func() bool {
					v, err := cache.Get[string](ctx, c, "k")
					return err == nil && v == "old" && c.Stats().NearHits > 0
				})
				faults.BlackHole()
				defer faults.Resume()
				if err := w.write(ctx, c); err == nil {
					t.Fatal("the write succeeded through a black hole")
				}
				if v, err := cache.Get[string](ctx, c, "k"); err == nil && v == "old" {
					t.Errorf("Get after the failed %s: %q from the near cache", w.name, v)
				}
			})
		}
	}, redistest.Redis8)
}
