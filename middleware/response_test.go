package middleware_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

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

func TestMiddleware_statusHeaders(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	tests := []struct {
		name, option, header string // header: where the status goes, "" nowhere
	}{
		{"default", "", "X-Cache"},
		{"renamed", "X-Edge-Cache", "X-Edge-Cache"},
		{"off", "-", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "a%d", renders.Add(1))
			}), &bedOptions{mw: &middleware.Options{StatusHeader: tt.option}})
			steps := []struct {
				method, status, cacheStatus, age string
				advance                          time.Duration
			}{
				{"GET", "MISS", "stampede; fwd=uri-miss; fwd-status=200; stored; ttl=60", "0", 0},
				{"GET", "HIT", "stampede; hit; ttl=53", "7", 7 * time.Second},
				{"GET", "HIT", "stampede; hit; ttl=47", "12", 5500 * time.Millisecond},
				{"POST", "BYPASS", "stampede; fwd=method", "", 0},
			}
			for _, st := range steps {
				b.clock.Advance(st.advance)
				r := b.do(t, st.method, "/h")
				for _, name := range []string{"X-Cache", "X-Edge-Cache"} {
					want := ""
					if name == tt.header {
						want = st.status
					}
					if got := r.header.Get(name); got != want {
						t.Errorf("%s: %s = %q, want %q", st.status, name, got, want)
					}
				}
				if got := r.header.Get("Cache-Status"); got != st.cacheStatus {
					t.Errorf("%s: Cache-Status = %q, want %q", st.status, got, st.cacheStatus)
				}
				if got := r.header.Get("Age"); got != st.age {
					t.Errorf("%s: Age = %q, want %q", st.status, got, st.age)
				}
			}
		})
	}
}

func TestMiddleware_etag(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		if r.URL.Path == "/own" {
			w.Header().Set("ETag", `"v1-tag"`)
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "%s body %d", r.URL.Path, n)
	}), nil)

	t.Run("the handler's", func(t *testing.T) {
		// A first request that is conditional gets its 304 from the
		// render, and the full response is what is stored.
		r := b.get(t, "/own", "If-None-Match", `"v1-tag"`)
		r.check(t, 304, "MISS", "")
		if got := r.header.Get("Etag"); got != `"v1-tag"` {
			t.Errorf("ETag = %q", got)
		}
		full := b.get(t, "/own")
		full.check(t, 200, "HIT", "/own body 1")
		if got := full.header.Get("Etag"); got != `"v1-tag"` {
			t.Errorf("ETag = %q, want the handler's", got)
		}
		tests := []struct {
			inm    string
			status int
		}{
			{`"v1-tag"`, 304},
			{`W/"v1-tag"`, 304},
			{`"other", "v1-tag"`, 304},
			{`*`, 304},
			{`"other"`, 200},
			{`"v1-tag-not"`, 200},
		}
		for _, tt := range tests {
			r := b.get(t, "/own", "If-None-Match", tt.inm)
			body := ""
			if tt.status == 200 {
				body = "/own body 1"
			}
			r.check(t, tt.status, "HIT", body)
			if tt.status == 304 && r.header.Get("Content-Length") != "" {
				t.Errorf("If-None-Match %s: 304 with Content-Length %s", tt.inm, r.header.Get("Content-Length"))
			}
			if got := r.header.Get("Etag"); got != `"v1-tag"` {
				t.Errorf("If-None-Match %s: ETag = %q", tt.inm, got)
			}
		}
	})
	t.Run("generated", func(t *testing.T) {
		first := b.get(t, "/gen")
		tag := first.header.Get("Etag")
		if !regexp.MustCompile(`^"[0-9a-z]+"$`).MatchString(tag) {
			t.Fatalf("generated ETag = %q", tag)
		}
		again := b.get(t, "/gen")
		again.check(t, 200, "HIT", first.body)
		if got := again.header.Get("Etag"); got != tag {
			t.Errorf("ETag on a hit = %q, want %q", got, tag)
		}
		other := b.get(t, "/gen2")
		if other.header.Get("Etag") == tag {
			t.Errorf("two bodies share the ETag %s", tag)
		}
		b.get(t, "/gen", "If-None-Match", tag).check(t, 304, "HIT", "")
		b.get(t, "/gen2", "If-None-Match", tag).check(t, 200, "HIT", other.body)
	})
}

// TestMiddleware_cacheStatus: Cache-Status (RFC 9211) says how each
// response was answered: a render for a URL without a stored response
// (uri-miss) or for one whose stored responses vary on other values
// (vary-miss), with the render's status, stored or not and why not; a
// request that waited for another's render (collapsed); a client's
// no-cache (request); a request the cache does not handle (bypass, with
// the reason); and the response's remaining freshness (ttl).
func TestMiddleware_cacheStatus(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 30*time.Second)
	gate := newRenderGate(ctx, 3)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := gate.next()
		switch r.URL.Path {
		case "/v":
			w.Header().Set("Vary", "Accept-Language")
		case "/private":
			w.Header().Set("Cache-Control", "private")
		}
		fmt.Fprintf(w, "render %d", n)
	})
	b := newTestBed(t, s, h, &bedOptions{procs: 2, mw: &middleware.Options{AllowNoCache: true}})
	status := func(r reply) string { return r.header.Get("Cache-Status") }
	want := func(what string, r reply, xcache, cs string) {
		t.Helper()
		if r.cache() != xcache || status(r) != cs {
			t.Errorf("%s: X-Cache %s, Cache-Status %q; want %s, %q", what, r.cache(), status(r), xcache, cs)
		}
	}
	want("first render of a URL", b.get(t, "/v", "Accept-Language", "en"), "MISS", "stampede; fwd=uri-miss; fwd-status=200; stored; ttl=60")
	want("a variant not stored yet", b.get(t, "/v", "Accept-Language", "nl"), "MISS", "stampede; fwd=vary-miss; fwd-status=200; stored; ttl=60")
	b.clock.Advance(1500 * time.Millisecond)
	want("a hit", b.get(t, "/v", "Accept-Language", "nl"), "HIT", "stampede; hit; ttl=58")

	first := b.goSend(ctx, http.MethodGet, "/c", procHeader, "0")
	redistest.Recv(t, ctx, gate.started, "the render of /c")
	waiter := b.goSend(ctx, http.MethodGet, "/c", procHeader, "1")
	redistest.WaitFor(t, ctx, "the other process waiting", func() bool { return b.caches[1].Stats().Waits >= 1 })
	gate.open()
	for i, ch := range []<-chan sent{first, waiter} {
		got := redistest.Recv(t, ctx, ch, "an answer")
		if got.err != nil {
			t.Fatal(got.err)
		}
		if i == 0 {
			want("the render", got.reply, "MISS", "stampede; fwd=uri-miss; fwd-status=200; stored; ttl=60")
		} else {
			want("a waiter", got.reply, "HIT", "stampede; fwd=uri-miss; collapsed; ttl=60")
		}
	}

	want("a client's no-cache", b.get(t, "/c", "Cache-Control", "no-cache"), "MISS", "stampede; fwd=request; fwd-status=200; stored; ttl=60")
	want("a response not stored", b.get(t, "/private"), "BYPASS", "stampede; fwd=miss; fwd-status=200; detail=not-stored")
	want("a request with a cookie", b.get(t, "/c", "Cookie", "s=1"), "BYPASS", "stampede; fwd=bypass; detail=cookie")
	want("a request with credentials", b.get(t, "/c", "Authorization", "Bearer x"), "BYPASS", "stampede; fwd=bypass; detail=authorization")
	want("an unsafe method", b.do(t, http.MethodDelete, "/c"), "BYPASS", "stampede; fwd=method")
}

// TestMiddleware_cacheStatusUpstream: the middleware's Cache-Status
// member comes last, after the members the response already carries (RFC
// 9211 2: a cache appends its member), on every answer: a stored response
// (the origin's members are stored, ours is appended when serving), a
// bypass and a render passed through, however the handler sets the field
// (Set, Add, on two lines, in another letter case, with or without
// writing a body), and our member is never there twice (issue 39).
func TestMiddleware_cacheStatusUpstream(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		switch r.URL.Query().Get("how") {
		case "add":
			hd.Add("Cache-Status", `origin; hit; detail="x, \"y\"", cdn; fwd=uri-miss`)
		case "lower":
			hd["cache-status"] = []string{`origin; hit; detail="x, \"y\"", cdn; fwd=uri-miss`}
		case "ours":
			// A handler that copies through what it got from this very
			// middleware (a second instance of it on the way, say).
			hd.Set("Cache-Status", "stampede; fwd=method")
			hd.Add("Cache-Status", `origin; hit; detail="x, \"y\"", cdn; fwd=uri-miss`)
		default:
			hd.Set("Cache-Status", `origin; hit; detail="x, \"y\""`)
			hd.Add("Cache-Status", "cdn; fwd=uri-miss")
		}
		if r.URL.Path == "/private" {
			hd.Set("Cache-Control", "private")
		}
		switch r.URL.Query().Get("write") {
		case "none":
		case "flush":
			w.WriteHeader(http.StatusOK)
			http.NewResponseController(w).Flush()
			fmt.Fprint(w, "x")
		default:
			fmt.Fprint(w, "x")
		}
	})
	b := newTestBed(t, s, h, nil)
	const up = `origin; hit; detail="x, \"y\"", cdn; fwd=uri-miss, `
	steps := []struct {
		what, method, path, xcache, ours string
		hdr                              []string
	}{
		{"a render, stored", "GET", "/s", "MISS", "stampede; fwd=uri-miss; fwd-status=200; stored; ttl=60", nil},
		{"a hit", "GET", "/s", "HIT", "stampede; hit; ttl=60", nil},
		{"a render passed through", "GET", "/private", "BYPASS", "stampede; fwd=miss; fwd-status=200; detail=not-stored", nil},
		{"a bypass", "GET", "/b", "BYPASS", "stampede; fwd=bypass; detail=cookie", []string{"Cookie", "a=1"}},
		{"a bypass, Add", "GET", "/b?how=add", "BYPASS", "stampede; fwd=bypass; detail=cookie", []string{"Cookie", "a=1"}},
		{"a bypass, lower case", "GET", "/b?how=lower", "BYPASS", "stampede; fwd=bypass; detail=cookie", []string{"Cookie", "a=1"}},
		{"a bypass writing nothing", "GET", "/b?write=none", "BYPASS", "stampede; fwd=bypass; detail=cookie", []string{"Cookie", "a=1"}},
		{"a bypass flushing", "GET", "/b?write=flush", "BYPASS", "stampede; fwd=bypass; detail=cookie", []string{"Cookie", "a=1"}},
		{"an unsafe method", "POST", "/b", "BYPASS", "stampede; fwd=method", nil},
		{"an unsafe method writing nothing", "POST", "/b?write=none", "BYPASS", "stampede; fwd=method", nil},
		{"an unsafe method, ours copied", "POST", "/b?how=ours", "BYPASS", "stampede; fwd=method", nil},
	}
	for _, st := range steps {
		r := b.do(t, st.method, st.path, st.hdr...)
		if got, want := r.header.Values("Cache-Status"), []string{up + st.ours}; r.cache() != st.xcache || len(got) != 1 || got[0] != want[0] {
			t.Errorf("%s: X-Cache %s, Cache-Status %q; want %s, %q", st.what, r.cache(), got, st.xcache, want)
		}
	}
}

// TestMiddleware_collapsedServed: a render answers its own request (MISS,
// not collapsed) and the requests that waited for it (HIT, collapsed),
// each counted in cache.Stats.Served of its own process; the render's
// EventServed counts the requests of its process. Cache-Status says no
// more than collapsed: how many a render answered is not known when a
// response goes out.
func TestMiddleware_collapsedServed(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 30*time.Second)
	gate := newRenderGate(ctx, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "render %d", gate.next()) })
	events := make(chan cache.Event, 8)
	obs := func(e cache.Event) {
		if e.Kind == cache.EventServed {
			events <- e
		}
	}
	b := newTestBed(t, s, h, &bedOptions{procs: 2, cache: &cache.Options{Observer: obs}})
	first := b.goSend(ctx, http.MethodGet, "/c", procHeader, "0")
	redistest.Recv(t, ctx, gate.started, "the render of /c")
	waiter := b.goSend(ctx, http.MethodGet, "/c", procHeader, "1")
	redistest.WaitFor(t, ctx, "the other process waiting", func() bool { return b.caches[1].Stats().Waits >= 1 })
	gate.open()
	for i, ch := range []<-chan sent{first, waiter} {
		got := redistest.Recv(t, ctx, ch, "an answer")
		if got.err != nil {
			t.Fatal(got.err)
		}
		collapsed := strings.Contains(got.reply.header.Get("Cache-Status"), "; collapsed")
		if collapsed != (i == 1) {
			t.Errorf("answer %d: Cache-Status %q, collapsed should be %v", i, got.reply.header.Get("Cache-Status"), i == 1)
		}
	}
	if e := redistest.Recv(t, ctx, events, "the render's EventServed"); e.Callers != 1 {
		t.Errorf("EventServed %+v: want the 1 request of its process", e)
	}
	if s0, s1 := b.caches[0].Stats().Served, b.caches[1].Stats().Served; s0 != 1 || s1 != 1 {
		t.Errorf("served %d and %d in the two processes, want 1 each: the render's request and the collapsed one", s0, s1)
	}
	select {
	case e := <-events:
		t.Errorf("another EventServed: %+v", e)
	default:
	}
}
