package cache_test

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
)

// TestGetOrLoad_ttlJitter: Expiry.Jitter shortens each entry's fresh time
// by a random fraction up to Jitter; the key's TTL is that plus
// Expiry.Stale.
func TestGetOrLoad_ttlJitter(t *testing.T) {
	const ttl, stale = 100 * time.Second, 20 * time.Second
	tests := []struct {
		name      string
		jitter    float64
		minSpread time.Duration
		maxSpread time.Duration
	}{
		{"no jitter", 0, 0, 2 * time.Second},
		{"jitter 0.5", 0.5, 5 * time.Second, ttl},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testCtx(t)
				ns := namespace(t)
				c, rc := newCache(t, s, &cache.Options{Namespace: ns, Expiry: cache.ExpiryPolicy{Fresh: ttl, Stale: stale, Jitter: tt.jitter}})
				const n = 20
				lo := time.Duration(float64(ttl)*(1-tt.jitter)) + stale - 2*time.Second // 2s for the test's own time
				hi := ttl + stale
				lowest, highest := hi, time.Duration(0)
				for i := range n {
					key := fmt.Sprintf("k%d", i)
					var err error
					if i%2 == 0 {
						err = cache.Set(ctx, c, key, i)
					} else {
						_, err = cache.GetOrLoad(ctx, c, key, func(context.Context) (int, error) { return i, nil })
					}
					if err != nil {
						t.Fatal(err)
					}
					pttl, err := rc.PTTL(ctx, valueKey(ns, key)).Result()
					if err != nil {
						t.Fatal(err)
					}
					if pttl < lo || pttl > hi {
						t.Errorf("%s: PTTL %v outside [%v, %v]", key, pttl, lo, hi)
					}
					raw, err := rc.Get(ctx, valueKey(ns, key)).Bytes()
					if err != nil {
						t.Fatal(err)
					}
					e, err := codec.Decode(raw)
					if fresh := e.FreshUntil.Sub(e.Written); err != nil || fresh > ttl || fresh < time.Duration(float64(ttl)*(1-tt.jitter))-time.Millisecond {
						t.Errorf("%s: fresh for %v (%v); want within [%v, %v]", key, fresh, err, time.Duration(float64(ttl)*(1-tt.jitter)), ttl)
					}
					lowest, highest = min(lowest, pttl), max(highest, pttl)
				}
				if spread := highest - lowest; spread < tt.minSpread || spread > tt.maxSpread {
					t.Errorf("PTTLs spread over %v (%v..%v); want %v..%v", spread, lowest, highest, tt.minSpread, tt.maxSpread)
				}
			})
		}
	})
}

// hundredYears is the longest expiry the cache sends to the server.
const hundredYears = 100 * 365 * 24 * time.Hour

// TestGetOrLoad_foreverDurations (issue 10, #13): durations set huge to
// mean "forever" (TTL, Stale and Negative in Options.Expiry, per call, from
// Expire) are clamped, so the value is stored with an expiry the server
// accepts, and the next call is a hit instead of waiting out a claim left
// behind by a failed write.
func TestGetOrLoad_foreverDurations(t *testing.T) {
	const forever = time.Duration(math.MaxInt64)
	tests := []struct {
		name string
		opts cache.Options
		call cache.Option // nil: none
		load func(ctx context.Context) (string, error)
	}{
		{name: "Options.Expiry.Stale", opts: cache.Options{Expiry: cache.ExpiryPolicy{Stale: forever}}},
		{name: "Options.Expiry.Fresh and Stale", opts: cache.Options{Expiry: cache.ExpiryPolicy{Fresh: forever, Stale: forever}}},
		{name: "Options.Expiry.Fresh with jitter", opts: cache.Options{Expiry: cache.ExpiryPolicy{Fresh: forever, Jitter: 0.5}}},
		{name: "WithExpiry", call: cache.WithExpiry(cache.Expiry{Fresh: forever, Stale: forever})},
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
				if v, err := cache.GetOrLoad(ctx, c, "k", load, tt.call); err != nil || v != "v" {
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
				if err := cache.Set(ctx, c, "set", "s", tt.call); err != nil {
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

// Expire, called by a loader, decides the stored value's freshness.
func TestExpire(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	ns := namespace(t)
	c, rc := newCache(t, s, &cache.Options{Namespace: ns, Expiry: cache.ExpiryPolicy{Fresh: time.Hour}})
	set := false
	_, err := cache.GetOrLoad(ctx, c, "token", func(ctx context.Context) (string, error) {
		set = cache.Expire(ctx, 2*time.Minute, 3*time.Minute)
		return "t", nil
	})
	if err != nil || !set {
		t.Fatalf("GetOrLoad: %v; Expire reported %t", err, set)
	}
	ttl := rc.PTTL(ctx, ns+":{token}").Val()
	if ttl <= 4*time.Minute || ttl > 5*time.Minute {
		t.Errorf("stored TTL = %v, want fresh+stale = 5m", ttl)
	}
	if cache.Expire(ctx, time.Minute, 0) {
		t.Error("Expire outside a loader reported true")
	}
}

func TestNew_badOptions(t *testing.T) {
	tests := []struct {
		name string
		opts cache.Options
		text string
	}{
		{"negative Expiry.Fresh", cache.Options{Expiry: cache.ExpiryPolicy{Fresh: -time.Second}}, "Expiry.Fresh -1s is negative"},
		{"negative Expiry.Stale", cache.Options{Expiry: cache.ExpiryPolicy{Stale: -time.Second}}, "Expiry.Stale -1s is negative"},
		{"negative Expiry.Negative", cache.Options{Expiry: cache.ExpiryPolicy{Negative: -time.Second}}, "Expiry.Negative -1s is negative"},
		{"negative LockTTL", cache.Options{LockTTL: -time.Second}, "LockTTL -1s is negative"},
		{"negative LoadTimeout", cache.Options{LoadTimeout: -time.Second}, "LoadTimeout -1s is negative"},
		{"negative WaitTimeout", cache.Options{WaitTimeout: -time.Second}, "WaitTimeout -1s is negative"},
		{"negative PollInterval", cache.Options{PollInterval: -time.Second}, "PollInterval -1s is negative"},
		{"negative Expiry.RefreshBackoff", cache.Options{Expiry: cache.ExpiryPolicy{RefreshBackoff: -time.Second}}, "Expiry.RefreshBackoff -1s is negative"},
		{"negative FailOpenCooldown", cache.Options{FailOpenCooldown: -time.Second}, "FailOpenCooldown -1s is negative"},
		{"Expiry.Fresh below 1ms", cache.Options{Expiry: cache.ExpiryPolicy{Fresh: time.Microsecond}}, "Expiry.Fresh 1µs is below 1ms"},
		{"LockTTL below 10ms", cache.Options{LockTTL: 5 * time.Millisecond}, "LockTTL 5ms is below 10ms"},
		{"Expiry.Jitter negative", cache.Options{Expiry: cache.ExpiryPolicy{Jitter: -0.1}}, "Expiry.Jitter -0.1 is outside [0, 1)"},
		{"Expiry.Jitter 1", cache.Options{Expiry: cache.ExpiryPolicy{Jitter: 1}}, "Expiry.Jitter 1 is outside [0, 1)"},
		{"Expiry.Jitter NaN", cache.Options{Expiry: cache.ExpiryPolicy{Jitter: math.NaN()}}, "Expiry.Jitter NaN is outside [0, 1)"},
		{"Expiry.EarlyRefresh negative", cache.Options{Expiry: cache.ExpiryPolicy{EarlyRefresh: -1}}, "Expiry.EarlyRefresh -1 must be a non-negative number"},
		{"Expiry.EarlyRefresh NaN", cache.Options{Expiry: cache.ExpiryPolicy{EarlyRefresh: math.NaN()}}, "Expiry.EarlyRefresh NaN must be a non-negative number"},
		{"Expiry.EarlyRefresh infinite", cache.Options{Expiry: cache.ExpiryPolicy{EarlyRefresh: math.Inf(1)}}, "Expiry.EarlyRefresh +Inf must be a non-negative number"},
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
			wantInvalid(t, err, lock.ErrInvalid, tt.text)
		})
	}
	if cmds := rec.reset(); len(cmds) != 0 {
		t.Errorf("bad options led to server calls: %q", cmds)
	}
}
