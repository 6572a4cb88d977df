package compare

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	gocache "github.com/go-redis/cache/v9"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/viccon/sturdyc"
)

var nsSeq atomic.Int64

// newStampede returns a stampede cache with its own client on a namespace
// unique to this call.
func newStampede(tb testing.TB, s *redistest.Server, ns string, opts cache.Options) *cache.Cache {
	tb.Helper()
	opts.Namespace = ns
	c, err := cache.New(s.Client(tb), &opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func namespace() string {
	return fmt.Sprintf("cmp%d-%d", time.Now().UnixNano(), nsSeq.Add(1))
}

// newGoCache returns a go-redis/cache instance with its own client and no
// local cache, so Redis is what the instances share.
func newGoCache(tb testing.TB, s *redistest.Server) *gocache.Cache {
	tb.Helper()
	return gocache.New(&gocache.Options{Redis: s.Client(tb)})
}

func goCacheGet(c *gocache.Cache, key string, ttl time.Duration, load getter) getter {
	return func(ctx context.Context) (string, error) {
		var v string
		err := c.Once(&gocache.Item{Ctx: ctx, Key: key, Value: &v, TTL: ttl,
			Do: func(*gocache.Item) (any, error) { return load(ctx) }})
		return v, err
	}
}

// TestCompare_coldKey: a key nobody has, 4 instances × 32 goroutines, a
// loader of 100 ms. How many loads?
func TestCompare_coldKey(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	tests := []struct {
		name      string
		instances func(t *testing.T, key string, load getter) []getter
		wantLoads int64
	}{
		{
			name: "stampede",
			instances: func(t *testing.T, key string, load getter) []getter {
				ns := namespace()
				var gets []getter
				for range instances {
					c := newStampede(t, s, ns, cache.Options{Expiry: cache.ExpiryPolicy{Fresh: time.Minute}})
					gets = append(gets, func(ctx context.Context) (string, error) {
						return cache.GetOrLoad(ctx, c, key, loader.Func[string](load))
					})
				}
				return gets
			},
			wantLoads: 1,
		},
		{
			name: "go-redis/cache",
			instances: func(t *testing.T, key string, load getter) []getter {
				var gets []getter
				for range instances {
					gets = append(gets, goCacheGet(newGoCache(t, s), key, time.Minute, load))
				}
				return gets
			},
			wantLoads: instances, // Once is a singleflight per instance
		},
		{
			name: "sturdyc",
			instances: func(t *testing.T, key string, load getter) []getter {
				var gets []getter
				for range instances {
					c := sturdyc.New[string](100, 1, time.Minute, 10, sturdyc.WithNoContinuousEvictions())
					gets = append(gets, func(ctx context.Context) (string, error) {
						return c.GetOrFetch(ctx, key, sturdyc.FetchFn[string](load))
					})
				}
				return gets
			},
			wantLoads: instances, // in-process only: one load per instance
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			ld := &counter{d: 100 * time.Millisecond}
			gets := tt.instances(t, redistest.Key(t, "cold"), ld.load)
			if _, err := storm(ctx, gets); err != nil {
				t.Fatal(err)
			}
			if err := ld.settle(ctx, 0); err != nil {
				t.Fatal(err)
			}
			loads := ld.done.Load()
			result(t, "cold key, 4 instances x 32 goroutines", tt.name, "loads", loads)
			if loads != tt.wantLoads {
				t.Errorf("loads = %d, want %d", loads, tt.wantLoads)
			}
		})
	}
}

// TestCompare_hotKeyExpired: a key every instance has read, now past its
// TTL (or, for sturdyc, due for its early refresh); 4 instances × 32
// goroutines ask for it at once, the loader takes 200 ms. How many loads,
// and how many callers waited longer than half a load?
func TestCompare_hotKeyExpired(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	const loadTime = 200 * time.Millisecond
	type setup struct {
		gets   []getter
		expire func(ctx context.Context) error // moves the key past its TTL
	}
	tests := []struct {
		name      string
		setup     func(t *testing.T, key string, load getter) setup
		wantLoads int64
		wantSlow  int
	}{
		{
			name: "stampede",
			setup: func(t *testing.T, key string, load getter) setup {
				var now atomic.Int64
				now.Store(time.Now().UnixNano())
				opts := cache.Options{
					Expiry: cache.ExpiryPolicy{
						Fresh: time.Minute,
						Stale: 10 * time.Minute,
					},
					Now: func() time.Time { return time.Unix(0, now.Load()) },
				}
				ns := namespace()
				var gets []getter
				for range instances {
					c := newStampede(t, s, ns, opts)
					gets = append(gets, func(ctx context.Context) (string, error) {
						return cache.GetOrLoad(ctx, c, key, loader.Func[string](load))
					})
				}
				return setup{gets: gets, expire: func(context.Context) error {
					now.Add(int64(2 * time.Minute)) // past TTL, within Expiry.Stale
					return nil
				}}
			},
			wantLoads: 1, // one background refresh for all instances
			wantSlow:  0, // the stale value is served at once
		},
		{
			name: "go-redis/cache",
			setup: func(t *testing.T, key string, load getter) setup {
				// No stale or refresh option: TTL only (1s is its minimum).
				var gets []getter
				for range instances {
					gets = append(gets, goCacheGet(newGoCache(t, s), key, time.Second, load))
				}
				rc := s.Client(t)
				return setup{gets: gets, expire: func(ctx context.Context) error {
					tick := time.NewTicker(10 * time.Millisecond)
					defer tick.Stop()
					for {
						n, err := rc.Exists(ctx, key).Result()
						if err != nil || n == 0 {
							return err
						}
						select {
						case <-ctx.Done():
							return ctx.Err()
						case <-tick.C: // Redis expiry gives no signal
						}
					}
				}}
			},
			wantLoads: instances,              // one per instance
			wantSlow:  instances * goroutines, // everyone waits for a load
		},
		{
			name: "sturdyc",
			setup: func(t *testing.T, key string, load getter) setup {
				// Early refreshes, as its README suggests: a read after
				// 10s refreshes in the background; 1h TTL.
				clock := sturdyc.NewTestClock(time.Now())
				var gets []getter
				for range instances {
					c := sturdyc.New[string](100, 1, time.Hour, 10,
						sturdyc.WithNoContinuousEvictions(),
						sturdyc.WithClock(clock),
						sturdyc.WithEarlyRefreshes(10*time.Second, 10*time.Second, time.Minute, time.Second))
					gets = append(gets, func(ctx context.Context) (string, error) {
						return c.GetOrFetch(ctx, key, sturdyc.FetchFn[string](load))
					})
				}
				return setup{gets: gets, expire: func(context.Context) error {
					clock.Add(15 * time.Second)
					return nil
				}}
			},
			wantLoads: instances, // one background refresh per instance
			wantSlow:  0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			ld := &counter{d: loadTime}
			su := tt.setup(t, redistest.Key(t, "hot"), ld.load)
			for _, get := range su.gets { // every instance has read the key
				if _, err := get(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if err := ld.settle(ctx, 1); err != nil {
				t.Fatal(err)
			}
			if err := su.expire(ctx); err != nil {
				t.Fatal(err)
			}
			before := ld.done.Load()
			took, err := storm(ctx, su.gets)
			if err != nil {
				t.Fatal(err)
			}
			// Wait for the expected background loads, but not for ever:
			// a library doing fewer is measured, not hung on.
			sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			if err := ld.settle(sctx, before+tt.wantLoads); err != nil {
				t.Log(err)
			}
			cancel()
			loads := ld.done.Load() - before
			slow := 0
			for _, d := range took {
				if d > loadTime/2 {
					slow++
				}
			}
			row := "hot key past TTL, 4 instances x 32 goroutines"
			result(t, row, tt.name, "loads", loads)
			result(t, row, tt.name, "slow", fmt.Sprintf("%d/%d", slow, len(took)))
			if loads != tt.wantLoads {
				t.Errorf("loads = %d, want %d", loads, tt.wantLoads)
			}
			if slow != tt.wantSlow {
				t.Errorf("%d of %d callers took over %v, want %d", slow, len(took), loadTime/2, tt.wantSlow)
			}
		})
	}
}
