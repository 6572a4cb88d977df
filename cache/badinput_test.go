package cache_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/redis/go-redis/v9"
)

// deadClient returns a client for an address nothing listens on, with a
// recorder that sees every command it would send. Bad input must be
// refused before any server call, so none of these tests needs a server.
func deadClient(tb testing.TB) (redis.UniversalClient, *recorder) {
	tb.Helper()
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	tb.Cleanup(func() { _ = rc.Close() })
	return rc, record(rc)
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

func TestNew_badOptions(t *testing.T) {
	tests := []struct {
		name string
		opts cache.Options
		text string
	}{
		{"negative TTL", cache.Options{TTL: -time.Second}, "TTL -1s is negative"},
		{"negative StaleTTL", cache.Options{StaleTTL: -time.Second}, "StaleTTL -1s is negative"},
		{"negative NegativeTTL", cache.Options{NegativeTTL: -time.Second}, "NegativeTTL -1s is negative"},
		{"negative LockTTL", cache.Options{LockTTL: -time.Second}, "LockTTL -1s is negative"},
		{"negative LoadTimeout", cache.Options{LoadTimeout: -time.Second}, "LoadTimeout -1s is negative"},
		{"negative WaitTimeout", cache.Options{WaitTimeout: -time.Second}, "WaitTimeout -1s is negative"},
		{"negative PollInterval", cache.Options{PollInterval: -time.Second}, "PollInterval -1s is negative"},
		{"negative RefreshBackoff", cache.Options{RefreshBackoff: -time.Second}, "RefreshBackoff -1s is negative"},
		{"negative FailOpenCooldown", cache.Options{FailOpenCooldown: -time.Second}, "FailOpenCooldown -1s is negative"},
		{"TTL below 1ms", cache.Options{TTL: time.Microsecond}, "TTL 1µs is below 1ms"},
		{"LockTTL below 10ms", cache.Options{LockTTL: 5 * time.Millisecond}, "LockTTL 5ms is below 10ms"},
		{"TTLJitter negative", cache.Options{TTLJitter: -0.1}, "TTLJitter -0.1 is outside [0, 1)"},
		{"TTLJitter 1", cache.Options{TTLJitter: 1}, "TTLJitter 1 is outside [0, 1)"},
		{"TTLJitter NaN", cache.Options{TTLJitter: math.NaN()}, "TTLJitter NaN is outside [0, 1)"},
		{"EarlyRefresh negative", cache.Options{EarlyRefresh: -1}, "EarlyRefresh -1 must be a non-negative number"},
		{"EarlyRefresh NaN", cache.Options{EarlyRefresh: math.NaN()}, "EarlyRefresh NaN must be a non-negative number"},
		{"EarlyRefresh infinite", cache.Options{EarlyRefresh: math.Inf(1)}, "EarlyRefresh +Inf must be a non-negative number"},
		{"Namespace with {", cache.Options{Namespace: "app{1"}, `Namespace "app{1" must be printable and without braces`},
		{"Namespace with }", cache.Options{Namespace: "app}1"}, `Namespace "app}1" must be printable and without braces`},
		{"Namespace with a space", cache.Options{Namespace: "my app"}, `Namespace "my app" must be printable`},
		{"PollInterval above WaitTimeout", cache.Options{PollInterval: 2 * time.Second, WaitTimeout: time.Second}, "PollInterval 2s exceeds WaitTimeout 1s"},
		{"MaxValueSize negative", cache.Options{MaxValueSize: -1}, "MaxValueSize -1 is negative"},
		{"DigestThreshold negative", cache.Options{DigestThreshold: -1}, "DigestThreshold -1 is negative"},
	}
	rc, rec := deadClient(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := cache.New(rc, &tt.opts)
			if c != nil {
				_ = c.Close()
				t.Errorf("New returned a Cache with an error %v", err)
			}
			wantInvalid(t, err, cache.ErrInvalid, tt.text)
		})
	}
	if cmds := rec.reset(); len(cmds) != 0 {
		t.Errorf("bad options led to server calls: %q", cmds)
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
			wantInvalid(t, err, cache.ErrInvalid, "nil Redis client")
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
		{"GetOrLoad empty key", func() error { _, err := cache.GetOrLoad(ctx, c, "", load); return err }, cache.ErrInvalid, "empty key"},
		{"Get empty key", func() error { _, err := cache.Get[string](ctx, c, ""); return err }, cache.ErrInvalid, "empty key"},
		{"Set empty key", func() error { return cache.Set(ctx, c, "", "v") }, cache.ErrInvalid, "empty key"},
		{"Delete empty key", func() error { return c.Delete(ctx, "") }, cache.ErrInvalid, "empty key"},
		{"GetOrLoad nil loader", func() error { _, err := cache.GetOrLoad[string](ctx, c, "k", nil); return err }, cache.ErrInvalid, `nil loader for key "k"`},
		{"GetOrLoad nil cache", func() error { _, err := cache.GetOrLoad(ctx, nilCache, "k", load); return err }, cache.ErrInvalid, "nil *Cache"},
		{"Get nil cache", func() error { _, err := cache.Get[string](ctx, nilCache, "k"); return err }, cache.ErrInvalid, "nil *Cache"},
		{"Set nil cache", func() error { return cache.Set(ctx, nilCache, "k", "v") }, cache.ErrInvalid, "nil *Cache"},
		{"Delete nil cache", func() error { return nilCache.Delete(ctx, "k") }, cache.ErrInvalid, "nil *Cache"},
		{"GetOrLoad WithTTL(0)", func() error { _, err := cache.GetOrLoad(ctx, c, "k", load, cache.WithTTL(0)); return err }, cache.ErrInvalid, "TTL 0s is below 1ms"},
		{"GetOrLoad WithTTL negative", func() error { _, err := cache.GetOrLoad(ctx, c, "k", load, cache.WithTTL(-time.Second)); return err }, cache.ErrInvalid, "TTL -1s is below 1ms"},
		{"GetOrLoad WithStaleTTL negative", func() error {
			_, err := cache.GetOrLoad(ctx, c, "k", load, cache.WithStaleTTL(-time.Second))
			return err
		}, cache.ErrInvalid, "StaleTTL -1s is negative"},
		{"GetOrLoad WithNegativeTTL negative", func() error {
			_, err := cache.GetOrLoad(ctx, c, "k", load, cache.WithNegativeTTL(-time.Second))
			return err
		}, cache.ErrInvalid, "NegativeTTL -1s is negative"},
		{"Set WithTTL(0)", func() error { return cache.Set(ctx, c, "k", "v", cache.WithTTL(0)) }, cache.ErrInvalid, "TTL 0s is below 1ms"},
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
