package middleware_test

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/hotkv/stampede/middleware"
)

// This file tests the options: what New and Cache refuse, and that the
// largest values they accept and the cache's MaxValueSize work together.

func badInputCache(tb testing.TB) *cache.Cache {
	tb.Helper()
	s := redistest.Shared(tb, redistest.Redis8)
	c, err := cache.New(s.Client(tb), &cache.Options{Namespace: "mw" + strings.TrimPrefix(redistest.Key(tb, ""), "test:")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// wantProblem fails tb unless err carries the package prefix and names
// the problem.
func wantProblem(tb testing.TB, err error, text string) {
	tb.Helper()
	switch {
	case err == nil:
		tb.Errorf("err = nil, want one naming %q", text)
	case !strings.HasPrefix(err.Error(), "middleware: "):
		tb.Errorf("err = %q, want the middleware: prefix", err)
	case !strings.Contains(err.Error(), text):
		tb.Errorf("err = %q, want it to name the problem: %q", err, text)
	case !errors.Is(err, lock.ErrInvalid):
		tb.Errorf("err = %q, want it to match ErrInvalid of middleware, cache and lock", err)
	}
}

func TestNew_badOptions(t *testing.T) {
	c := badInputCache(t)
	tests := []struct {
		name string
		opts middleware.Options
		text string
	}{
		{"negative TTL", middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: -time.Second}}, "Freshness.Fresh -1s is negative"},
		{"TTL below 1ms", middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: time.Microsecond}}, "Freshness.Fresh 1µs is below 1ms"},
		{"negative Freshness.Stale", middleware.Options{Freshness: middleware.FreshnessPolicy{Stale: -time.Minute}}, "Freshness.Stale -1m0s is negative"},
		{"negative Freshness.StaleIfError", middleware.Options{Freshness: middleware.FreshnessPolicy{StaleIfError: -time.Second}}, "Freshness.StaleIfError -1s is negative"},
		{"negative StoreLimit", middleware.Options{StoreLimit: -1}, "StoreLimit -1 is negative"},
		{"negative WaitTimeout", middleware.Options{WaitTimeout: -time.Second}, "WaitTimeout -1s is negative"},
		{"WaitTimeout below 1ms", middleware.Options{WaitTimeout: time.Nanosecond}, "WaitTimeout 1ns is below 1ms"},
		{"503 in Statuses", middleware.Options{Statuses: []int{200, 503}}, "status 503 in Statuses: server errors are never stored"},
		{"500 in Statuses", middleware.Options{Statuses: []int{500}}, "status 500 in Statuses: server errors are never stored"},
		{"99 in Statuses", middleware.Options{Statuses: []int{99}}, "status 99 in Statuses is not a final status"},
		{"100 in Statuses", middleware.Options{Statuses: []int{200, 100}}, "status 100 in Statuses is not a final status"},
		{"600 in Statuses", middleware.Options{Statuses: []int{600}}, "status 600 in Statuses is not a final status"},
		{"negative status", middleware.Options{Statuses: []int{-200}}, "status -200 in Statuses is not a final status"},
		{"empty Keys.Headers entry", middleware.Options{Keys: middleware.KeyPolicy{Headers: []string{"X-Forwarded-Proto", ""}}}, "empty name in Keys.Headers"},
		{"empty Keys.IgnoreQuery entry", middleware.Options{Keys: middleware.KeyPolicy{IgnoreQuery: []string{""}}}, "empty name in Keys.Headers or Keys.IgnoreQuery"},
		{"empty Targeted name", middleware.Options{Targeted: []string{""}}, `Targeted field name "" is not a header field name`},
		{"Targeted name with a space", middleware.Options{Targeted: []string{"CDN Cache-Control"}}, `Targeted field name "CDN Cache-Control" is not a header field name`},
		{"Targeted name not ASCII", middleware.Options{Targeted: []string{"Cache-Contrôle"}}, `Targeted field name "Cache-Contrôle" is not a header field name`},
		{"Targeted Cache-Control", middleware.Options{Targeted: []string{"CDN-Cache-Control", "cache-control"}}, `Targeted field name "cache-control": Cache-Control is the field a targeted one replaces`},
		{"empty Tags.Headers name", middleware.Options{Tags: middleware.TagPolicy{Headers: []string{"Surrogate-Key", ""}}}, `Tags.Headers name "" is not a header field name`},
		{"Tags.Headers name with a colon", middleware.Options{Tags: middleware.TagPolicy{Headers: []string{"Cache-Tag:"}}}, `Tags.Headers name "Cache-Tag:" is not a header field name`},
		{"negative Tags.Lifetime", middleware.Options{Tags: middleware.TagPolicy{Lifetime: -time.Hour}}, "Tags.Lifetime -1h0m0s is negative"},
		{"Tags.Lifetime below 1s", middleware.Options{Tags: middleware.TagPolicy{Lifetime: time.Millisecond}}, "Tags.Lifetime 1ms is below 1s"},
		{"negative Tags.ClockSkew", middleware.Options{Tags: middleware.TagPolicy{ClockSkew: -time.Second}}, "Tags.ClockSkew -1s is negative"},
		{"Purge without Authorize", middleware.Options{Purge: &middleware.PurgePolicy{}}, "Purge.Authorize is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			m, err := middleware.New(c, &opts)
			wantProblem(t, err, tt.text)
			if m != nil {
				t.Errorf("New returned a Middleware with the error")
			}
		})
	}
	t.Run("nil cache", func(t *testing.T) {
		var nilCache *cache.Cache
		m, err := middleware.New(nilCache, nil)
		wantProblem(t, err, "nil *cache.Cache")
		if m != nil {
			t.Errorf("New returned a Middleware with the error")
		}
	})
	t.Run("the options are not modified", func(t *testing.T) {
		opts := middleware.Options{Keys: middleware.KeyPolicy{Headers: []string{"x-forwarded-proto"}}}
		if _, err := middleware.New(c, &opts); err != nil {
			t.Fatal(err)
		}
		if opts.Freshness.Fresh != 0 || opts.StatusHeader != "" || opts.Keys.Headers[0] != "x-forwarded-proto" {
			t.Errorf("New changed the caller's Options: %+v", opts)
		}
	})
	for _, opts := range []*middleware.Options{nil, {}, {Freshness: middleware.FreshnessPolicy{Fresh: time.Millisecond}, WaitTimeout: time.Millisecond, Statuses: []int{200, 404, 501}}, {Targeted: []string{"CDN-Cache-Control", "Stampede-Cache-Control"}}} {
		if _, err := middleware.New(c, opts); err != nil {
			t.Errorf("New(%+v) = %v", opts, err)
		}
	}
}

func TestCache_panicsOnBadConfig(t *testing.T) {
	c := badInputCache(t)
	tests := []struct {
		name string
		c    *cache.Cache
		ttl  time.Duration
		text string
	}{
		{"negative ttl", c, -time.Second, "middleware: Freshness.Fresh -1s is negative"},
		{"ttl below 1ms", c, 10 * time.Microsecond, "middleware: Freshness.Fresh 10µs is below 1ms"},
		{"nil cache", nil, time.Minute, "middleware: nil *cache.Cache"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				v := recover()
				err, ok := v.(error)
				if !ok || err.Error() != tt.text || !errors.Is(err, lock.ErrInvalid) {
					t.Errorf("panic value %#v, want an error %q", v, tt.text)
				}
			}()
			middleware.Cache(tt.c, tt.ttl)
			t.Error("Cache did not panic")
		})
	}
	if mw := middleware.Cache(c, 0); mw == nil { // zero: the default TTL
		t.Error("Cache(c, 0) = nil")
	}
}

// TestMiddleware_hugeStaleTTL: the largest durations the options accept
// do not overflow into a broken entry.
func TestMiddleware_hugeStaleTTL(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "r%d", renders.Add(1))
	}), &bedOptions{mw: &middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: math.MaxInt64 / 2, Stale: math.MaxInt64}}})
	b.get(t, "/huge").check(t, 200, "MISS", "r1")
	b.get(t, "/huge").check(t, 200, "HIT", "r1")
	b.waitStored(t, "/huge", "r1")
	// The cache caps an entry's life at 100 years ("forever").
	if got := b.ttl(t, "/huge"); got < 99*365*24*time.Hour {
		t.Errorf("server TTL = %v, want the cache's cap of 100 years", got)
	}
}

// TestNew_storeLimitAboveMaxValueSize: New refuses a StoreLimit that the
// cache cannot store, and the default fits the cache (issue 10, 9).
func TestNew_storeLimitAboveMaxValueSize(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	c, err := cache.New(s.Client(t), &cache.Options{Namespace: "mw" + strings.TrimPrefix(redistest.Key(t, ""), "test:"), MaxValueSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	for _, limit := range []int{1 << 20, 64 << 10, 64<<10 - 1} {
		m, err := middleware.New(c, &middleware.Options{StoreLimit: limit})
		wantProblem(t, err, "MaxValueSize")
		if m != nil {
			t.Errorf("StoreLimit %d: New returned a Middleware with the error", limit)
		}
	}
	if _, err := middleware.New(c, &middleware.Options{StoreLimit: 32 << 10}); err != nil {
		t.Errorf("StoreLimit 32 KiB with MaxValueSize 64 KiB: %v", err)
	}
}

// TestMiddleware_storeLimitFitsTheCache: with the cache's MaxValueSize
// below the default StoreLimit, a response the middleware records is one
// the cache stores: each is either stored (MISS, then HIT) or streamed
// through (BYPASS), never a MISS that nobody can find again.
func TestMiddleware_storeLimitFitsTheCache(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	tests := []struct {
		name   string
		limit  int // Options.StoreLimit
		size   int
		header int // bytes of an extra response header
	}{
		{"default limit, small body", 0, 16 << 10, 0},
		{"default limit, body near MaxValueSize", 0, 60 << 10, 0},
		{"default limit, body at MaxValueSize", 0, 64 << 10, 0},
		{"default limit, body above MaxValueSize", 0, 100 << 10, 0},
		{"default limit, large headers", 0, 16 << 10, 60 << 10},
		{"largest limit, body at it", 48 << 10, 48 << 10, 0},
		{"largest limit, body at it and large headers", 48 << 10, 48 << 10, 20 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := renders.Add(1)
				if tt.header > 0 {
					w.Header().Set("X-Big", strings.Repeat("h", tt.header))
				}
				_, _ = w.Write([]byte(strings.Repeat(strconv.Itoa(int(n)), tt.size)))
			}), &bedOptions{procs: 2, cache: &cache.Options{MaxValueSize: 64 << 10}, mw: &middleware.Options{StoreLimit: tt.limit}})
			first := b.get(t, "/big")
			if first.status != 200 || first.body != strings.Repeat("1", tt.size) {
				t.Fatalf("first: %v", first)
			}
			switch first.cache() {
			case "MISS":
				b.waitStored(t, "/big", "111")
				b.get(t, "/big", procHeader, "1").check(t, 200, "HIT", first.body)
			case "BYPASS":
				b.get(t, "/big", procHeader, "1").check(t, 200, "BYPASS", strings.Repeat("2", tt.size))
			default:
				t.Fatalf("first: %v", first)
			}
			if tt.size <= 16<<10 && tt.header == 0 && first.cache() != "MISS" {
				t.Errorf("a %d-byte body was not stored", tt.size)
			}
		})
	}
}

// TestNew_heuristicFreshness: New refuses a fraction outside [0, 1] (NaN
// too) and a negative cap.
func TestNew_heuristicFreshness(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	c, err := cache.New(s.Client(t), &cache.Options{Namespace: redistest.Key(t, "h")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var zero float64
	for _, tt := range []struct {
		name string
		opts middleware.Options
		ok   bool
	}{
		{"0.1", middleware.Options{Freshness: middleware.FreshnessPolicy{Heuristic: 0.1}}, true},
		{"1", middleware.Options{Freshness: middleware.FreshnessPolicy{Heuristic: 1}}, true},
		{"above 1", middleware.Options{Freshness: middleware.FreshnessPolicy{Heuristic: 1.5}}, false},
		{"negative", middleware.Options{Freshness: middleware.FreshnessPolicy{Heuristic: -0.1}}, false},
		{"NaN", middleware.Options{Freshness: middleware.FreshnessPolicy{Heuristic: zero / zero}}, false},
		{"negative cap", middleware.Options{Freshness: middleware.FreshnessPolicy{Heuristic: 0.1, HeuristicMaxAge: -time.Second}}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := middleware.New(c, &tt.opts)
			if (err == nil) != tt.ok {
				t.Errorf("New: %v, want ok %v", err, tt.ok)
			}
			if err != nil && !strings.HasPrefix(err.Error(), "middleware: ") {
				t.Errorf("error %q lacks the middleware: prefix", err)
			}
		})
	}
}

// TestSharedOptions: the shared-cache preset is the six fields
// examples/proxy set by hand for scripts/cache-tests.sh (-explicit
// -heuristic 0.1 -surrogate-control -revalidate-no-cache -allow-no-cache
// -cache-cookies), Targeted CDN-Cache-Control and Freshness.StaleIfError
// ten minutes, every other field at
// its default; each call returns Options of its own (its slice too), and
// New accepts them.
func TestSharedOptions(t *testing.T) {
	byHand := middleware.Options{
		Freshness: middleware.FreshnessPolicy{Explicit: true, Heuristic: 0.1, RevalidateNoCache: true, StaleIfError: 10 * time.Minute},

		SurrogateControl: true,
		Targeted:         []string{"CDN-Cache-Control"},
		Tags:             middleware.TagPolicy{Headers: []string{"Surrogate-Key", "Cache-Tag"}},

		AllowNoCache:             true,
		CacheRequestsWithCookies: true,
	}
	got := middleware.SharedOptions()
	if !reflect.DeepEqual(*got, byHand) {
		t.Errorf("SharedOptions() = %+v, want %+v", *got, byHand)
	}
	got.AllowNoCache = false
	got.Targeted[0] = "Other"
	if again := middleware.SharedOptions(); !again.AllowNoCache || again.Targeted[0] != "CDN-Cache-Control" {
		t.Error("a change to one SharedOptions() result shows in the next")
	}
	s := redistest.Shared(t, redistest.Redis8)
	c, err := cache.New(s.Client(t), &cache.Options{Namespace: "mw" + strings.TrimPrefix(redistest.Key(t, ""), "test:")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := middleware.New(c, middleware.SharedOptions()); err != nil {
		t.Errorf("New(c, SharedOptions()): %v", err)
	}
}
