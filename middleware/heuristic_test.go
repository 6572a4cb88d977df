package middleware_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/middleware"
)

// TestMiddleware_heuristicFreshness: with HeuristicFreshness a response
// without explicit freshness but with Last-Modified is fresh for that
// fraction of the time since then (RFC 9111 4.2.2), at most
// HeuristicMaxAge, if its status is heuristically cacheable or it says
// public; with ExplicitFreshness it is stored then, without it the
// heuristic comes before TTL. Explicit freshness always wins, and a
// Last-Modified later than the Date, or not one valid date, gives no
// heuristic (TTL, or with ExplicitFreshness not stored).
func TestMiddleware_heuristicFreshness(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	at := func(d time.Duration) func(time.Time) string {
		return func(now time.Time) string { return now.Add(d).UTC().Format(http.TimeFormat) }
	}
	fixed := func(v string) func(time.Time) string { return func(time.Time) string { return v } }
	const explicit, fraction = true, 0.1
	tests := []struct {
		name   string
		status int
		hdr    map[string][]func(time.Time) string
		opts   middleware.Options
		fresh  time.Duration // 0: not stored
	}{
		{"200, a tenth of 10h", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}, "Date": {at(0)}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, time.Hour},
		{"without Date: counted to when received", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, time.Hour},
		{"a tenth of 10h to Date, an hour old: passed", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-11 * time.Hour)}, "Date": {at(-time.Hour)}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, 0},
		{"fraction 0.5", 404, map[string][]func(time.Time) string{"Last-Modified": {at(-time.Hour)}, "Date": {at(0)}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: 0.5}, 30 * time.Minute},
		{"capped at a day", 200, map[string][]func(time.Time) string{"Last-Modified": {fixed("Mon, 02 Jan 2006 15:04:05 GMT")}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, 24 * time.Hour},
		{"capped at HeuristicMaxAge", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-100 * time.Hour)}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction, HeuristicMaxAge: 2 * time.Hour}, 2 * time.Hour},
		{"501", 501, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, time.Hour},
		{"302 is not heuristically cacheable", 302, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, 0},
		{"201 is not heuristically cacheable", 201, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, 0},
		{"302 with public", 302, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}, "Cache-Control": {fixed("public")}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, time.Hour},
		{"503 with public: never a server error", 503, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}, "Cache-Control": {fixed("public")}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, 0},
		{"private", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}, "Cache-Control": {fixed("private")}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, 0},
		{"max-age wins", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}, "Cache-Control": {fixed("max-age=30")}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, 30 * time.Second},
		{"Expires wins", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}, "Expires": {at(40 * time.Second)}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, 40 * time.Second},
		{"an invalid Expires wins too", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}, "Expires": {fixed("0")}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, 0},
		{"off: not stored", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{ExplicitFreshness: explicit}, 0},
		{"Last-Modified in the future", 200, map[string][]func(time.Time) string{"Last-Modified": {at(time.Hour)}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, 0},
		{"Last-Modified after Date", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-time.Hour)}, "Date": {at(-2 * time.Hour)}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, 0},
		{"Last-Modified not a date", 200, map[string][]func(time.Time) string{"Last-Modified": {fixed("yesterday")}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, 0},
		{"two Last-Modified that disagree", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour), at(-20 * time.Hour)}},
			middleware.Options{ExplicitFreshness: explicit, HeuristicFreshness: fraction}, 0},
		{"Last-Modified is Date: no freshness, not TTL", 200, map[string][]func(time.Time) string{"Last-Modified": {at(0)}, "Date": {at(0)}},
			middleware.Options{HeuristicFreshness: fraction, TTL: time.Hour}, 0},
		{"defaults: heuristic before TTL", 200, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{HeuristicFreshness: fraction, TTL: 10 * time.Minute}, time.Hour},
		{"defaults: TTL without Last-Modified", 200, nil,
			middleware.Options{HeuristicFreshness: fraction, TTL: 10 * time.Minute}, 10 * time.Minute},
		{"defaults: TTL for Last-Modified in the future", 200, map[string][]func(time.Time) string{"Last-Modified": {at(time.Hour)}},
			middleware.Options{HeuristicFreshness: fraction, TTL: 10 * time.Minute}, 10 * time.Minute},
		{"defaults: TTL for a status Statuses allows but the heuristic does not cover", 302, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{HeuristicFreshness: fraction, TTL: 10 * time.Minute, Statuses: []int{200, 302}}, 10 * time.Minute},
		{"defaults: Statuses still decide", 404, map[string][]func(time.Time) string{"Last-Modified": {at(-10 * time.Hour)}},
			middleware.Options{HeuristicFreshness: fraction, Statuses: []int{200}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fresh := tt.fresh
			var renders atomic.Int32
			opts := tt.opts
			var b *testBed
			b = newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, fs := range tt.hdr {
					for _, f := range fs {
						w.Header().Add(k, f(b.clock.Now()))
					}
				}
				w.WriteHeader(tt.status)
				fmt.Fprintf(w, "r%d", renders.Add(1))
			}), &bedOptions{procs: 2, mw: &opts})
			if fresh == 0 {
				b.get(t, "/h").check(t, tt.status, "BYPASS", "r1")
				b.get(t, "/h", procHeader, "1").check(t, tt.status, "BYPASS", "r2")
				b.waitGone(t, "/h")
				return
			}
			b.get(t, "/h").check(t, tt.status, "MISS", "r1")
			b.waitStored(t, "/h", "r1")
			b.clock.Advance(fresh - time.Second)
			b.get(t, "/h", procHeader, "1").check(t, tt.status, "HIT", "r1")
			b.clock.Advance(2 * time.Second)
			if r := b.get(t, "/h"); r.cache() == "HIT" {
				t.Errorf("%v past its freshness lifetime %v", r, fresh)
			}
		})
	}
}

// TestMiddleware_heuristicFreshnessAge: the heuristic lifetime counts from
// Last-Modified to the response's Date, and the response's age when
// received (Date an hour ago) is taken off it as for any lifetime.
func TestMiddleware_heuristicFreshnessAge(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	var b *testBed
	b = newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := b.clock.Now()
		w.Header().Set("Date", now.Add(-time.Hour).UTC().Format(http.TimeFormat))
		w.Header().Set("Last-Modified", now.Add(-21*time.Hour).UTC().Format(http.TimeFormat))
		fmt.Fprintf(w, "r%d", renders.Add(1))
	}), &bedOptions{mw: &middleware.Options{ExplicitFreshness: true, HeuristicFreshness: 0.1}})
	// 20h between Last-Modified and Date: 2h fresh, 1h of it gone.
	b.get(t, "/age").check(t, 200, "MISS", "r1")
	b.waitStored(t, "/age", "r1")
	b.clock.Advance(time.Hour - time.Second)
	hit := b.get(t, "/age")
	hit.check(t, 200, "HIT", "r1")
	if got, want := hit.header.Get("Age"), fmt.Sprint(int((2*time.Hour - time.Second).Seconds())); got != want {
		t.Errorf("Age = %s, want %s", got, want)
	}
	b.clock.Advance(2 * time.Second)
	if r := b.get(t, "/age"); r.cache() == "HIT" {
		t.Errorf("%v past its freshness lifetime", r)
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
		{"0.1", middleware.Options{HeuristicFreshness: 0.1}, true},
		{"1", middleware.Options{HeuristicFreshness: 1}, true},
		{"above 1", middleware.Options{HeuristicFreshness: 1.5}, false},
		{"negative", middleware.Options{HeuristicFreshness: -0.1}, false},
		{"NaN", middleware.Options{HeuristicFreshness: zero / zero}, false},
		{"negative cap", middleware.Options{HeuristicFreshness: 0.1, HeuristicMaxAge: -time.Second}, false},
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
