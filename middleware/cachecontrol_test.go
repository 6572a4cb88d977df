package middleware_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

// TestMiddleware_malformedCacheControl: whatever a handler puts in
// Cache-Control, nothing panics, and the response is either not stored
// (what cannot be read is treated conservatively) or stored on the
// server for a sane time. Every case of the rules is in httprule's
// TestStore_malformedCacheControl; these few go through a server.
func TestMiddleware_malformedCacheControl(t *testing.T) {
	const max = time.Duration(1<<31) * time.Second // RFC 9111 1.2.2
	tests := []struct {
		name   string
		cc     []string
		stored time.Duration // the server TTL; 0: not stored
	}{
		{"non-numbers", []string{"max-age=abc, s-maxage="}, 0},
		{"beyond 2^31", []string{"max-age=9999999999"}, max},
		{"stale window beyond 2^31", []string{"max-age=10, stale-while-revalidate=99999999999"}, 10*time.Second + max},
		{"unbalanced quote swallows private", []string{`max-age="60, private`}, 0},
		{"two fields", []string{"max-age=30", "no-store"}, 0},
		{"unknown directives only", []string{"foo, bar=baz, =, ==, \"\""}, time.Minute},
	}
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for _, v := range tt.cc {
					w.Header().Add("Cache-Control", v)
				}
				fmt.Fprintf(w, "r%d", renders.Add(1))
			}), nil)
			if tt.stored == 0 {
				b.get(t, "/mcc").check(t, 200, "BYPASS", "r1")
				b.get(t, "/mcc").check(t, 200, "BYPASS", "r2")
				b.waitGone(t, "/mcc")
				return
			}
			b.get(t, "/mcc").check(t, 200, "MISS", "r1")
			b.waitStored(t, "/mcc", "r1")
			if got := b.ttl(t, "/mcc"); got > tt.stored || got < tt.stored-5*time.Second {
				t.Errorf("server TTL = %v, want %v", got, tt.stored)
			}
			b.get(t, "/mcc").check(t, 200, "HIT", "r1")
		})
	}
}

// TestMiddleware_expiresAndPragma: Expires is a freshness source when
// Cache-Control has no max-age or s-maxage; a date that is invalid or not
// after the response's Date (or now) means already stale, which is not
// stored; Pragma: no-cache without Cache-Control means no-cache
// (issue 10, 6).
func TestMiddleware_expiresAndPragma(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	tests := []struct {
		name  string
		hdr   func(now time.Time) http.Header
		opts  middleware.Options
		fresh time.Duration // 0: not stored
	}{
		{"Expires 0 and Pragma", func(time.Time) http.Header {
			return http.Header{"Expires": {"0"}, "Pragma": {"no-cache"}}
		}, middleware.Options{}, 0},
		{"Expires 0", func(time.Time) http.Header { return http.Header{"Expires": {"0"}} }, middleware.Options{}, 0},
		{"Expires invalid", func(time.Time) http.Header { return http.Header{"Expires": {"soon"}} }, middleware.Options{}, 0},
		{"Expires empty", func(time.Time) http.Header { return http.Header{"Expires": {""}} }, middleware.Options{}, 0},
		{"Expires past", func(now time.Time) http.Header {
			return http.Header{"Expires": {now.Add(-time.Hour).Format(http.TimeFormat)}}
		}, middleware.Options{}, 0},
		{"Expires at Date", func(now time.Time) http.Header {
			return http.Header{"Date": {now.Format(http.TimeFormat)}, "Expires": {now.Format(http.TimeFormat)}}
		}, middleware.Options{}, 0},
		{"Expires past with a stale window", func(now time.Time) http.Header {
			return http.Header{"Expires": {now.Add(-time.Second).Format(http.TimeFormat)}}
		}, middleware.Options{Freshness: middleware.FreshnessPolicy{Stale: time.Hour}}, 0},
		{"Expires from Date", func(now time.Time) http.Header {
			return http.Header{"Date": {now.Format(http.TimeFormat)}, "Expires": {now.Add(30 * time.Second).Format(http.TimeFormat)}}
		}, middleware.Options{}, 30 * time.Second},
		{"Expires from now", func(now time.Time) http.Header {
			return http.Header{"Expires": {now.Add(40 * time.Second).Format(http.TimeFormat)}}
		}, middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: time.Hour}}, 40 * time.Second},
		{"Expires within an old Date's lifetime", func(now time.Time) http.Header {
			// Rendered an hour ago upstream, with one hour and 20s to live.
			return http.Header{"Date": {now.Add(-time.Hour).Format(http.TimeFormat)}, "Expires": {now.Add(20 * time.Second).Format(http.TimeFormat)}}
		}, middleware.Options{}, 20 * time.Second},
		{"max-age over Expires", func(time.Time) http.Header {
			return http.Header{"Cache-Control": {"max-age=50"}, "Expires": {"0"}}
		}, middleware.Options{}, 50 * time.Second},
		{"s-maxage over Expires", func(now time.Time) http.Header {
			return http.Header{"Cache-Control": {"s-maxage=50"}, "Expires": {now.Add(time.Hour).Format(http.TimeFormat)}}
		}, middleware.Options{}, 50 * time.Second},
		{"Pragma no-cache", func(time.Time) http.Header { return http.Header{"Pragma": {"No-Cache"}} }, middleware.Options{}, 0},
		{"Pragma with Cache-Control", func(time.Time) http.Header {
			return http.Header{"Pragma": {"no-cache"}, "Cache-Control": {"public, max-age=45"}}
		}, middleware.Options{}, 45 * time.Second},
		{"Pragma other", func(time.Time) http.Header { return http.Header{"Pragma": {"x-other"}} }, middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: 25 * time.Second}}, 25 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			opts := tt.opts
			var b *testBed
			b = newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for k, vs := range tt.hdr(b.clock.Now()) {
					w.Header()[k] = vs
				}
				fmt.Fprintf(w, "r%d", renders.Add(1))
			}), &bedOptions{procs: 2, mw: &opts})
			if tt.fresh == 0 {
				b.get(t, "/e").check(t, 200, "BYPASS", "r1")
				b.get(t, "/e", procHeader, "1").check(t, 200, "BYPASS", "r2")
				b.waitGone(t, "/e")
				return
			}
			b.get(t, "/e").check(t, 200, "MISS", "r1")
			b.waitStored(t, "/e", "r1")
			if got := b.ttl(t, "/e"); got > tt.fresh || got < tt.fresh-5*time.Second {
				t.Errorf("server TTL = %v, want %v", got, tt.fresh)
			}
			b.clock.Advance(tt.fresh - time.Second)
			b.get(t, "/e", procHeader, "1").check(t, 200, "HIT", "r1")
			// Past its lifetime it is not fresh. (The server still holds
			// it, on its own clock, so the cache serves it as stale.)
			b.clock.Advance(2 * time.Second)
			if r := b.get(t, "/e"); r.cache() == "HIT" {
				t.Errorf("%v past its freshness lifetime", r)
			}
		})
	}
}
