package cache_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
)

// This file holds the regression tests of issue 10's cache defects
// (hardening): each failed on the code before its fix.

// hundredYears is the longest expiry the cache sends to the server.
const hundredYears = 100 * 365 * 24 * time.Hour

// TestGetOrLoad_foreverDurations (issue 10, #13): durations set huge to
// mean "forever" (TTL, StaleTTL and NegativeTTL in Options, per call, from
// Expire) are clamped, so the value is stored with an expiry the server
// accepts, and the next call is a hit instead of waiting out a claim left
// behind by a failed write.
func TestGetOrLoad_foreverDurations(t *testing.T) {
	const forever = time.Duration(math.MaxInt64)
	tests := []struct {
		name string
		opts cache.Options
		call []cache.Option
		load func(ctx context.Context) (string, error)
	}{
		{name: "Options.StaleTTL", opts: cache.Options{StaleTTL: forever}},
		{name: "Options.TTL and StaleTTL", opts: cache.Options{TTL: forever, StaleTTL: forever}},
		{name: "Options.TTL with jitter", opts: cache.Options{TTL: forever, TTLJitter: 0.5}},
		{name: "WithStaleTTL", call: []cache.Option{cache.WithStaleTTL(forever)}},
		{name: "WithTTL and WithStaleTTL", call: []cache.Option{cache.WithTTL(forever), cache.WithStaleTTL(forever)}},
		{name: "Expire", load: func(ctx context.Context) (string, error) {
			cache.Expire(ctx, forever, forever)
			return "v", nil
		}},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testCtx(t)
				opts := tt.opts
				opts.Namespace = namespace(t)
				opts.LockTTL = time.Minute // a claim left behind would block the second call for this long
				c, rc := newCache(t, s, &opts)
				load := tt.load
				if load == nil {
					load = func(context.Context) (string, error) { return "v", nil }
				}
				if v, err := cache.GetOrLoad(ctx, c, "k", load, tt.call...); err != nil || v != "v" {
					t.Fatalf("GetOrLoad = %q, %v", v, err)
				}
				if v, err := cache.Get[string](ctx, c, "k"); err != nil || v != "v" {
					t.Fatalf("Get after the load = %q, %v; want the value stored", v, err)
				}
				ttl, err := rc.PTTL(ctx, valueKey(opts.Namespace, "k")).Result()
				if err != nil || ttl <= 0 || ttl > hundredYears {
					t.Errorf("stored PTTL = %v, %v; want an expiry within 100 years", ttl, err)
				}
				if st := c.Stats(); st.ServerErrors != 0 || st.Loads != 1 {
					t.Errorf("stats %+v; want 1 load and no server error", st)
				}

				// Set with the same durations stores too, with an expiry.
				if err := cache.Set(ctx, c, "set", "s", tt.call...); err != nil {
					t.Fatalf("Set: %v", err)
				}
				ttl, err = rc.PTTL(ctx, valueKey(opts.Namespace, "set")).Result()
				if err != nil || ttl <= 0 || ttl > hundredYears {
					t.Errorf("PTTL after Set = %v, %v; want an expiry within 100 years", ttl, err)
				}
			})
		}
	}, redistest.Redis8, redistest.Redis7)
}

// TestNew_foreverWaitTimeout (issue 10, #13): a WaitTimeout set huge to mean
// "forever" does not overflow the limit of the background flight (which
// adds LoadTimeout to it) into an already expired context.
func TestNew_foreverWaitTimeout(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	c, _ := newCache(t, s, &cache.Options{WaitTimeout: time.Duration(math.MaxInt64)})
	if v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) { return "v", nil }); err != nil || v != "v" {
		t.Fatalf("GetOrLoad = %q, %v", v, err)
	}
	if v, err := cache.Get[string](ctx, c, "k"); err != nil || v != "v" {
		t.Fatalf("Get = %q, %v; want the value stored", v, err)
	}
}
