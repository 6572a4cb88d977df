package cache_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
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
		WaitTimeouts: 8, LockContention: 9, FailOpenLoads: 10, DecodeFailures: 11, Refreshes: 12, WritesSkipped: 13, ServerErrors: 14, Served: 15}
	want := cache.Stats{Hits: 2, StaleHits: 4, Misses: 6, Loads: 8, LoadErrors: 10, Coalesced: 12, Waits: 14,
		WaitTimeouts: 16, LockContention: 18, FailOpenLoads: 20, DecodeFailures: 22, Refreshes: 24, WritesSkipped: 26, ServerErrors: 28, Served: 30}
	if got := a.Add(a); got != want {
		t.Fatalf("Add = %+v, want %+v", got, want)
	}
	if got := a.Add(cache.Stats{}); got != a {
		t.Fatalf("Add of zero = %+v, want %+v", got, a)
	}
}

// TestGetOrLoad_awkwardKeys: long, braced and binary keys work everywhere
// (on a cluster the value and lock keys must share a slot, which Delete's
// two-key DEL checks) and distinct keys stay distinct.
func TestGetOrLoad_awkwardKeys(t *testing.T) {
	long := strings.Repeat("x", 200)
	keys := []string{
		strings.Repeat("x", redisx.MaxPlainKey), strings.Repeat("x", redisx.MaxPlainKey+1),
		long + "a", long + "b", "{tag}", "{tag}x", "a}{b", "{", "}", "{}",
		"a\x00b", "a\x00c", "\x00", "with space", "ünïcödé", "#short", redisx.Tag(long + "a"),
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newCache(t, s, nil)
		for _, k := range keys {
			if v, err := cache.GetOrLoad(ctx, c, k, func(context.Context) (string, error) { return k, nil }); err != nil || v != k {
				t.Fatalf("GetOrLoad(%.20q) = %.20q, %v", k, v, err)
			}
		}
		var calls atomic.Int32
		for _, k := range keys {
			if v, err := cache.GetOrLoad(ctx, c, k, neverLoad[string](&calls)); err != nil || v != k {
				t.Errorf("second GetOrLoad(%.20q) = %.20q, %v; want a hit", k, v, err)
			}
		}
		if st := c.Stats(); st.Loads != uint64(len(keys)) || calls.Load() != 0 {
			t.Errorf("stats = %+v; want %d loads", st, len(keys))
		}
		for i, k := range keys {
			if i%2 == 0 {
				if err := c.Delete(ctx, k); err != nil {
					t.Errorf("Delete(%.20q): %v", k, err)
				}
			}
		}
		for i, k := range keys {
			v, err := cache.Get[string](ctx, c, k)
			switch {
			case i%2 == 0 && !errors.Is(err, cache.ErrMiss):
				t.Errorf("Get(%.20q) after Delete = %.20q, %v; want ErrMiss", k, v, err)
			case i%2 == 1 && (err != nil || v != k):
				t.Errorf("Get(%.20q) = %.20q, %v; want its own value", k, v, err)
			}
		}
	})
}

// wantInvalid fails tb unless err wraps want, names the problem (contains
// text) and carries the package prefix.
func wantInvalid(tb testing.TB, err, want error, text string) {
	tb.Helper()
	switch {
	case !errors.Is(err, want):
		tb.Errorf("err = %v, want %v", err, want)
	case !strings.Contains(err.Error(), text):
		tb.Errorf("err = %q, want it to name the problem: %q", err, text)
	case !strings.HasPrefix(err.Error(), "cache: "):
		tb.Errorf("err = %q, want the cache: prefix", err)
	}
}

func TestNew_nilClient(t *testing.T) {
	tests := []struct {
		name string
		rc   cache.RedisClient
	}{
		{"nil interface", nil},
		{"nil *redis.Client", (*redis.Client)(nil)},
		{"nil *redis.ClusterClient", (*redis.ClusterClient)(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := cache.New(tt.rc, nil)
			if c != nil {
				t.Errorf("New returned a Cache for a nil client")
			}
			wantInvalid(t, err, lock.ErrInvalid, "nil Redis client")
		})
	}
}

// TestCalls_badInput: bad arguments to the package's functions are refused
// with ErrInvalid (or ErrValueTooLarge), before any server call and
// without running the loader.
func TestCalls_badInput(t *testing.T) {
	rc, rec := deadClient(t)
	ctx := testCtx(t)
	c, err := cache.New(rc, &cache.Options{Namespace: namespace(t), MaxValueSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	var nilCache *cache.Cache
	var loads atomic.Int32
	load := func(context.Context) (string, error) { loads.Add(1); return "v", nil }

	tests := []struct {
		name string
		call func() error
		want error
		text string
	}{
		{"GetOrLoad empty key", func() error { _, err := cache.GetOrLoad(ctx, c, "", load); return err }, lock.ErrInvalid, "empty key"},
		{"Get empty key", func() error { _, err := cache.Get[string](ctx, c, ""); return err }, lock.ErrInvalid, "empty key"},
		{"Set empty key", func() error { return cache.Set(ctx, c, "", "v") }, lock.ErrInvalid, "empty key"},
		{"Delete empty key", func() error { return c.Delete(ctx, "") }, lock.ErrInvalid, "empty key"},
		{"GetOrLoad nil loader", func() error { _, err := cache.GetOrLoad[string](ctx, c, "k", nil); return err }, lock.ErrInvalid, `nil loader for key "k"`},
		{"GetOrLoad nil cache", func() error { _, err := cache.GetOrLoad(ctx, nilCache, "k", load); return err }, lock.ErrInvalid, "nil *Cache"},
		{"Get nil cache", func() error { _, err := cache.Get[string](ctx, nilCache, "k"); return err }, lock.ErrInvalid, "nil *Cache"},
		{"Set nil cache", func() error { return cache.Set(ctx, nilCache, "k", "v") }, lock.ErrInvalid, "nil *Cache"},
		{"Delete nil cache", func() error { return nilCache.Delete(ctx, "k") }, lock.ErrInvalid, "nil *Cache"},
		{"GetOrLoad WithExpiry Fresh below 1ms", func() error {
			_, err := cache.GetOrLoad(ctx, c, "k", load, cache.WithExpiry(cache.Expiry{Fresh: time.Microsecond}))
			return err
		}, lock.ErrInvalid, "cache: WithExpiry: Fresh 1µs is below 1ms"},
		{"GetOrLoad WithExpiry Fresh negative", func() error {
			_, err := cache.GetOrLoad(ctx, c, "k", load, cache.WithExpiry(cache.Expiry{Fresh: -time.Second}))
			return err
		}, lock.ErrInvalid, "cache: WithExpiry: Fresh -1s is below 1ms"},
		{"GetOrLoad WithExpiry Stale negative", func() error {
			_, err := cache.GetOrLoad(ctx, c, "k", load, cache.WithExpiry(cache.Expiry{Fresh: time.Minute, Stale: -time.Second}))
			return err
		}, lock.ErrInvalid, "cache: WithExpiry: Stale -1s is negative"},
		{"GetOrLoad WithNegative negative", func() error {
			_, err := cache.GetOrLoad(ctx, c, "k", load, cache.WithNegative(-time.Second))
			return err
		}, lock.ErrInvalid, "cache: WithNegative -1s is negative"},
		{"GetOrLoad WithWaitTimeout below 1ms", func() error {
			_, err := cache.GetOrLoad(ctx, c, "k", load, cache.WithWaitTimeout(time.Microsecond))
			return err
		}, lock.ErrInvalid, "cache: WithWaitTimeout 1µs is below 1ms"},
		{"Set WithExpiry Fresh below 1ms", func() error {
			return cache.Set(ctx, c, "k", "v", cache.WithExpiry(cache.Expiry{Fresh: time.Microsecond}))
		}, lock.ErrInvalid, "cache: WithExpiry: Fresh 1µs is below 1ms"},
		{"Set above MaxValueSize", func() error { return cache.Set(ctx, c, "k", strings.Repeat("x", 100)) }, cache.ErrValueTooLarge, "MaxValueSize is 16"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec.reset()
			wantInvalid(t, tt.call(), tt.want, tt.text)
			if cmds := rec.reset(); len(cmds) != 0 {
				t.Errorf("server calls made: %q", cmds)
			}
		})
	}
	if n := loads.Load(); n != 0 {
		t.Errorf("the loader ran %d times for bad input", n)
	}
}

// TestCalls_closed: every call on a closed Cache returns ErrClosed without
// a server call; Close is idempotent.
func TestCalls_closed(t *testing.T) {
	rc, rec := deadClient(t)
	ctx := testCtx(t)
	c, err := cache.New(rc, &cache.Options{Namespace: namespace(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	var loads atomic.Int32
	load := func(context.Context) (int, error) { loads.Add(1); return 1, nil }
	calls := map[string]func() error{
		"GetOrLoad": func() error { _, err := cache.GetOrLoad(ctx, c, "k", load); return err },
		"Get":       func() error { _, err := cache.Get[int](ctx, c, "k"); return err },
		"Set":       func() error { return cache.Set(ctx, c, "k", 1) },
		"Delete":    func() error { return c.Delete(ctx, "k") },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, cache.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if cmds := rec.reset(); len(cmds) != 0 || loads.Load() != 0 {
		t.Errorf("calls after Close sent %q and ran the loader %d times", cmds, loads.Load())
	}
}

// TestCache_wrongType: a key that holds a value of another type (a hash
// written by someone else under the cache's name) is an error that says
// so, from every read, never a plain miss; nothing overwrites it.
func TestCache_wrongType(t *testing.T) {
	reads := []struct {
		name string
		read func(ctx context.Context, c *cache.Cache, key string) error
	}{
		{"Get", func(ctx context.Context, c *cache.Cache, key string) error {
			_, err := cache.Get[string](ctx, c, key)
			return err
		}},
		{"GetOrLoad", func(ctx context.Context, c *cache.Cache, key string) error {
			_, err := cache.GetOrLoad(ctx, c, key, func(context.Context) (string, error) { return "loaded", nil })
			return err
		}},
		{"GetOrLoadMany", func(ctx context.Context, c *cache.Cache, key string) error {
			_, err := cache.GetOrLoadMany(ctx, c, []string{key}, func(_ context.Context, ks []string) (map[string]string, error) {
				return map[string]string{ks[0]: "loaded"}, nil
			})
			return err
		}},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, near := range []bool{false, true} {
			for _, tc := range reads {
				name := tc.name
				if near {
					name += "/near"
				}
				t.Run(name, func(t *testing.T) {
					ctx := testCtx(t)
					opts := &cache.Options{Namespace: namespace(t)}
					if near {
						opts.Near = &cache.Near{MaxEntries: 100}
					}
					c, rc := newCache(t, s, opts)
					if err := rc.HSet(ctx, opts.Namespace+":{k}", "f", "v").Err(); err != nil {
						t.Fatal(err)
					}
					err := tc.read(ctx, c, "k")
					if err == nil || errors.Is(err, cache.ErrMiss) || !strings.Contains(err.Error(), "WRONGTYPE") {
						t.Errorf("err = %v, want an error that says the key holds another type", err)
					}
					if typ := rc.Type(ctx, opts.Namespace+":{k}").Val(); typ != "hash" {
						t.Errorf("the key is now a %s", typ)
					}
				})
			}
		}
	}, redistest.Redis8, redistest.Valkey)
}

// TestGet_otherType: Get of a key whose value was stored as another Go
// type is a miss that says why, not a plain one: errors.Is finds ErrMiss,
// and the message names the type.
func TestGet_otherType(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newCache(t, s, nil)
		if err := cache.Set(ctx, c, "int", 42); err != nil {
			t.Fatal(err)
		}
		_, err := cache.Get[string](ctx, c, "int")
		if !errors.Is(err, cache.ErrMiss) || !strings.Contains(err.Error(), "as string") {
			t.Errorf("Get[string] of an int: %v, want a miss that names the type", err)
		}
	}, redistest.Redis8)
}
