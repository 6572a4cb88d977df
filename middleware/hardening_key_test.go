package middleware_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/middleware"
)

// This file holds the regression tests for the key and storage defects of
// issue 10: what the handler sees when it renders for the cache, what the
// key is made of, and which responses may be stored and how.

// echoQuery renders what the handler sees of the query, every way it can
// look at it.
func echoQuery(renders *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "n=%d raw=%s uri=%s utm=%s", renders.Add(1), r.URL.RawQuery, r.RequestURI, r.FormValue("utm_source"))
	})
}

// TestMiddleware_ignoredQueryNotRendered: a parameter left out of the key
// is removed from the request the handler renders for the cache, so what
// one client put there cannot be stored for everybody (issue 10, 1).
func TestMiddleware_ignoredQueryNotRendered(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, echoQuery(&renders), &bedOptions{procs: 2,
		mw: &middleware.Options{IgnoreQuery: []string{"utm_source"}}})
	b.get(t, "/landing?utm_source=%3Cscript%3Eevil%3C%2Fscript%3E&id=1").
		check(t, 200, "MISS", "n=1 raw=id=1 uri=/landing?id=1 utm=")
	b.get(t, "/landing?id=1", procHeader, "1").check(t, 200, "HIT", "n=1 raw=id=1 uri=/landing?id=1 utm=")
	b.get(t, "/landing?utm_source=a&utm_source=b").check(t, 200, "MISS", "n=2 raw= uri=/landing utm=")
	b.get(t, "/landing", procHeader, "1").check(t, 200, "HIT", "n=2 raw= uri=/landing utm=")
	// The kept parameters reach the handler as sent, in their order.
	b.get(t, "/landing?b=%7e&utm_source=x&a=1+2").check(t, 200, "MISS", "n=3 raw=b=%7e&a=1+2 uri=/landing?b=%7e&a=1+2 utm=")
	if raw := b.storedText(t, "/landing?id=1"); raw == "" || strings.Contains(raw, "evil") || strings.Contains(raw, "utm_source") {
		t.Errorf("stored entry %q", raw)
	}
	// A request that bypasses the cache is the handler's own business.
	b.get(t, "/landing?utm_source=x&id=1", "Authorization", "Bearer a").
		check(t, 200, "BYPASS", "n=4 raw=utm_source=x&id=1 uri=/landing?utm_source=x&id=1 utm=x")
}

// TestMiddleware_keyQuery: with an allow-list only the named parameters
// are keyed and passed to the handler.
func TestMiddleware_keyQuery(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, echoQuery(&renders), &bedOptions{procs: 2,
		mw: &middleware.Options{KeyQuery: []string{"id", "page"}}})
	steps := []struct {
		path, xcache, body string
	}{
		{"/list?page=2&x=evil&id=1&utm_source=m", "MISS", "n=1 raw=page=2&id=1 uri=/list?page=2&id=1 utm="},
		{"/list?id=1&page=2", "HIT", "n=1 raw=page=2&id=1 uri=/list?page=2&id=1 utm="},
		{"/list?id=1&page=2&cachebuster=1", "HIT", "n=1 raw=page=2&id=1 uri=/list?page=2&id=1 utm="},
		{"/list?id=1", "MISS", "n=2 raw=id=1 uri=/list?id=1 utm="},
		{"/list?x=1&y=2", "MISS", "n=3 raw= uri=/list utm="},
		{"/list", "HIT", "n=3 raw= uri=/list utm="},
		{"/list?ID=1", "HIT", "n=3 raw= uri=/list utm="}, // names are case-sensitive, as in url.Values
	}
	for i, st := range steps {
		b.get(t, st.path, procHeader, strconv.Itoa(i%2)).check(t, 200, st.xcache, st.body)
	}
}

// TestMiddleware_revalidatingClientRendersOnce: the request chosen to
// render carries validators and the handler answers them; the render for
// the cache does not see them, so it is stored once for everyone and the
// middleware answers the client's condition itself (issue 10, 5).
func TestMiddleware_revalidatingClientRendersOnce(t *testing.T) {
	const waiters = 8
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 30*time.Second)
		g := newRenderGate(ctx, 1)
		b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := g.next()
			w.Header().Set("ETag", `"v1"`)
			for _, name := range []string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range"} {
				if r.Header.Get(name) != "" {
					w.WriteHeader(http.StatusNotModified) // what an ETag-aware handler does, simplified
					return
				}
			}
			fmt.Fprintf(w, "full body %d", n)
		}), &bedOptions{procs: 2})
		first := b.goSend(ctx, "GET", "/rv", "If-None-Match", `"v1"`, "If-Modified-Since", time.Now().UTC().Format(http.TimeFormat))
		redistest.Recv(t, ctx, g.started, "the render")
		var replies []<-chan sent
		for i := range waiters {
			replies = append(replies, b.goSend(ctx, "GET", "/rv", procHeader, strconv.Itoa(i%2)))
		}
		redistest.WaitFor(t, ctx, "the waiters", func() bool {
			st := b.stats()
			return st.Misses == waiters+1 && st.Waits == 1
		})
		g.open()
		r := redistest.Recv(t, ctx, first, "the revalidating client")
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.check(t, 304, "MISS", "")
		for _, ch := range replies {
			w := redistest.Recv(t, ctx, ch, "a waiter")
			if w.err != nil {
				t.Fatal(w.err)
			}
			if w.status != 200 || w.body != "full body 1" || (w.cache() != "HIT" && w.cache() != "MISS") {
				t.Errorf("waiter got %v, want the one render's full body", w.reply)
			}
		}
		if n := g.renders.Load(); n != 1 {
			t.Errorf("renders = %d, want 1", n)
		}
	}, redistest.Redis8, redistest.Cluster)
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
		}, middleware.Options{StaleTTL: time.Hour}, 0},
		{"Expires from Date", func(now time.Time) http.Header {
			return http.Header{"Date": {now.Format(http.TimeFormat)}, "Expires": {now.Add(30 * time.Second).Format(http.TimeFormat)}}
		}, middleware.Options{}, 30 * time.Second},
		{"Expires from now", func(now time.Time) http.Header {
			return http.Header{"Expires": {now.Add(40 * time.Second).Format(http.TimeFormat)}}
		}, middleware.Options{TTL: time.Hour}, 40 * time.Second},
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
		{"Pragma other", func(time.Time) http.Header { return http.Header{"Pragma": {"x-other"}} }, middleware.Options{TTL: 25 * time.Second}, 25 * time.Second},
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

// TestMiddleware_repeatedQueryParameters: the values of a repeated
// parameter keep their order in the key (issue 10, 7).
func TestMiddleware_repeatedQueryParameters(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "n=%d ids=%q", renders.Add(1), r.URL.Query()["id"])
	}), &bedOptions{procs: 2})
	b.get(t, "/r?id=2&id=1").check(t, 200, "MISS", `n=1 ids=["2" "1"]`)
	b.get(t, "/r?id=1&id=2", procHeader, "1").check(t, 200, "MISS", `n=2 ids=["1" "2"]`)
	b.get(t, "/r?id=2&x=0&id=1", procHeader, "1").check(t, 200, "MISS", `n=3 ids=["2" "1"]`)
	b.get(t, "/r?x=0&id=2&id=1").check(t, 200, "HIT", `n=3 ids=["2" "1"]`) // other names move freely
	b.get(t, "/r?id=2&id=1", procHeader, "1").check(t, 200, "HIT", `n=1 ids=["2" "1"]`)
	b.get(t, "/r?id=1&id=2").check(t, 200, "HIT", `n=2 ids=["1" "2"]`)
}

// TestMiddleware_preconditionsOnly2xx: a stored response other than a 2xx
// is served whole whatever the request's If-None-Match (RFC 9110
// 13.2.1; issue 10, 8).
func TestMiddleware_preconditionsOnly2xx(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		w.Header().Set("ETag", `"t1"`)
		if r.URL.Path == "/gone" {
			w.WriteHeader(http.StatusNotFound)
		}
		fmt.Fprintf(w, "%s %d", r.URL.Path, n)
	}), &bedOptions{procs: 2})
	b.get(t, "/gone").check(t, 404, "MISS", "/gone 1")
	for _, inm := range []string{"*", `"t1"`, `W/"t1"`} {
		b.get(t, "/gone", "If-None-Match", inm).check(t, 404, "HIT", "/gone 1")
		b.get(t, "/gone", "If-None-Match", inm, procHeader, "1").check(t, 404, "HIT", "/gone 1")
	}
	b.get(t, "/ok").check(t, 200, "MISS", "/ok 2")
	b.get(t, "/ok", "If-None-Match", "*").check(t, 304, "HIT", "")
	b.get(t, "/ok", "If-None-Match", `"t1"`, procHeader, "1").check(t, 304, "HIT", "")
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
