package cache_test

import (
	"context"
	"testing"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/engine"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// TestNear_decodeFailureCountedOnce: a value that cannot be decoded as the
// type asked for counts one decode failure per call with the near cache
// on, as without it: the near cache's copy fails first, and the call then
// reads the key from the server, where it meets the same entry and counts
// it.
func TestNear_decodeFailureCountedOnce(t *testing.T) {
	calls := []struct {
		name string
		call func(ctx context.Context, c *cache.Cache)
	}{
		{"Get", func(ctx context.Context, c *cache.Cache) { _, _ = cache.Get[int](ctx, c, "k") }},
		{"Peek", func(ctx context.Context, c *cache.Cache) {
			_, f, _ := engine.Peek[int](ctx, engine.Of(c), "k")
			f.Count()
		}},
		{"GetOrLoad", func(ctx context.Context, c *cache.Cache) {
			_, _ = cache.GetOrLoad(ctx, c, "k", func(context.Context) (int, error) { return 1, nil })
		}},
		{"GetOrLoadMany", func(ctx context.Context, c *cache.Cache) {
			_, _ = cache.GetOrLoadMany(ctx, c, []string{"k"}, func(_ context.Context, keys []string) (map[string]int, error) {
				return map[string]int{"k": 1}, nil
			})
		}},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range calls {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testCtx(t)
				c := nearCache(t, s, nearOpts(t))
				if err := cache.Set(ctx, c, "k", "not a number"); err != nil {
					t.Fatal(err)
				}
				settle(t, ctx, c, func() { _, _ = cache.Get[string](ctx, c, "k") })
				before := c.Stats()
				tt.call(ctx, c)
				if n := c.Stats().DecodeFailures - before.DecodeFailures; n != 1 {
					t.Errorf("%s of a string as an int counted %d decode failures; want 1", tt.name, n)
				}
			})
		}
	}, redistest.Redis8, redistest.Valkey)
}
