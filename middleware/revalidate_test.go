package middleware_test

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

// This file tests revalidation (RFC 9111 4.3): a stale stored response
// with a validator of the handler's is revalidated with a conditional
// render, and a 304 freshens it.

// origin is a test handler with one current representation, which it
// answers a conditional request for with a 304 when the request's
// validators match, as an origin behind a proxy does. It records the
// conditional headers of every render.
type origin struct {
	mu      sync.Mutex
	etag    string            // the current ETag, if it sends one
	lm      string            // the current Last-Modified, if it sends one
	cc      string            // Cache-Control of every answer
	extra   map[string]string // further fields of the next answers (a 304's too)
	ignore  bool              // answer 200 even to matching conditions
	fail    int               // status of every answer, when set
	seen    []http.Header     // the conditional headers of each render
	renders atomic.Int32      // renders, 304s included
}

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := o.renders.Add(1)
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := http.Header{}
	for _, name := range []string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "X-V"} {
		if vs := r.Header.Values(name); len(vs) > 0 {
			seen[name] = vs
		}
	}
	o.seen = append(o.seen, seen)
	h := w.Header()
	h.Set("Cache-Control", o.cc)
	if o.etag != "" {
		h.Set("Etag", o.etag)
	}
	if o.lm != "" {
		h.Set("Last-Modified", o.lm)
	}
	for k, v := range o.extra {
		h[k] = []string{v} // as written: header names in any case count
	}
	if o.fail != 0 {
		w.WriteHeader(o.fail)
		return
	}
	match := o.etag != "" && r.Header.Get("If-None-Match") == o.etag ||
		o.etag == "" && o.lm != "" && r.Header.Get("If-Modified-Since") == o.lm
	if match && !o.ignore {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	fmt.Fprintf(w, "body-%d", n)
}

func (o *origin) set(f func(o *origin)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f(o)
}

// last is the conditional headers of the latest render.
func (o *origin) last() http.Header {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen[len(o.seen)-1]
}

// TestMiddleware_revalidate: past its freshness, a stored response with
// the handler's ETag or Last-Modified is revalidated with If-None-Match /
// If-Modified-Since from the stored response; a 304 keeps the stored body
// and status, updates its fields and its freshness, and it is stored
// again; a handler that ignores the conditions answers 200 as ever.
func TestMiddleware_revalidate(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	const lm = "Wed, 01 Jan 2020 00:00:00 GMT"
	for _, tt := range []struct {
		name     string
		etag, lm string
		ignore   bool
		want     http.Header // the revalidation's conditions
	}{
		{"ETag", `"v1"`, "", false, http.Header{"If-None-Match": {`"v1"`}}},
		{"weak ETag", `W/"v1"`, "", false, http.Header{"If-None-Match": {`W/"v1"`}}},
		{"Last-Modified", "", lm, false, http.Header{"If-Modified-Since": {lm}}},
		{"both", `"v1"`, lm, false, http.Header{"If-None-Match": {`"v1"`}, "If-Modified-Since": {lm}}},
		{"handler ignores conditions", `"v1"`, "", true, http.Header{"If-None-Match": {`"v1"`}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := &origin{etag: tt.etag, lm: tt.lm, cc: "max-age=10", extra: map[string]string{"X-Test": "a"}, ignore: tt.ignore}
			b := newTestBed(t, s, o, nil)
			b.get(t, "/r").check(t, 200, "MISS", "body-1")
			b.waitStored(t, "/r", "body-1")
			b.clock.Advance(5 * time.Second)
			b.get(t, "/r").check(t, 200, "HIT", "body-1")

			o.set(func(o *origin) { o.extra["X-Test"] = "b-updated" })
			b.clock.Advance(6 * time.Second) // stale: max-age=10 has passed
			if ttl := b.ttl(t, "/r"); ttl <= 0 {
				t.Fatalf("server TTL %v: the response was not kept past its freshness", ttl)
			}
			r := b.get(t, "/r")
			want := "body-1" // the stored body, freshened by the 304
			if tt.ignore {
				want = "body-2"
			}
			r.check(t, 200, "MISS", want)
			if got := o.last(); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("the revalidation sent %v, want %v", got, tt.want)
			}
			if got := r.header.Get("X-Test"); got != "b-updated" {
				t.Errorf("X-Test = %q, want the 304's b-updated", got)
			}
			if got := r.header.Get("Age"); got != "0" {
				t.Errorf("Age = %s, want 0 (counted from the 304)", got)
			}
			b.waitStored(t, "/r", "b-updated")
			b.clock.Advance(9 * time.Second) // fresh again for 10s from the 304
			hit := b.get(t, "/r")
			hit.check(t, 200, "HIT", want)
			if got := hit.header.Get("X-Test"); got != "b-updated" {
				t.Errorf("X-Test = %q on the hit after the revalidation", got)
			}
			if n := o.renders.Load(); n != 2 {
				t.Errorf("renders = %d, want 2", n)
			}
		})
	}
}

// TestMiddleware_revalidateHeaderUpdate: what a 304 updates (RFC 9111
// 3.2): every field of the 304 replaces the stored one, in any letter
// case the handler wrote it, but those that describe the stored body
// (Content-Length, Content-Encoding, Content-MD5, Content-Range), the
// ETag and Vary; a 304 without Date does not leave the stored Date.
func TestMiddleware_revalidateHeaderUpdate(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	o := &origin{etag: `"v1"`, cc: "max-age=10", extra: map[string]string{
		"Content-Type": "text/plain", "X-Kept": "stored", "Content-Encoding": "identity", "Content-Md5": "md5-a",
	}}
	b := newTestBed(t, s, o, nil)
	b.get(t, "/u").check(t, 200, "MISS", "body-1")
	b.waitStored(t, "/u", "body-1")
	o.set(func(o *origin) {
		o.extra = map[string]string{
			"content-type":     "text/plain; charset=utf-8", // as written in the map
			"Content-Length":   "99",
			"Content-Encoding": "gzip",
			"Content-Md5":      "md5-b",
			// No other ETag: a 304 with one freshens nothing (see
			// TestMiddleware_revalidateOtherRepresentation).
			"Cache-Control": "max-age=100",
			"X-New":         "new",
		}
	})
	b.clock.Advance(11 * time.Second)
	r := b.get(t, "/u")
	r.check(t, 200, "MISS", "body-1")
	for name, want := range map[string]string{
		"Content-Type": "text/plain; charset=utf-8", "Content-Length": "6", "Content-Encoding": "identity",
		"Content-Md5": "md5-a", "Etag": `"v1"`, "Cache-Control": "max-age=100", "X-New": "new", "X-Kept": "stored",
	} {
		if got := r.header.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if d, err := http.ParseTime(r.header.Get("Date")); err != nil || d.Before(b.clock.Now().Add(-time.Second)) {
		t.Errorf("Date = %q, want the 304's time", r.header.Get("Date"))
	}
	b.waitStored(t, "/u", "max-age=100")
	b.clock.Advance(90 * time.Second) // fresh for max-age=100 from the 304
	b.get(t, "/u").check(t, 200, "HIT", "body-1")
}

// TestMiddleware_revalidateNotStorable: a 304 that sets a cookie, or
// says private or no-store, makes the freshened response not stored: its
// client gets it (with the cookie: the render was its own), nobody else
// does, and the next request revalidates again.
func TestMiddleware_revalidateNotStorable(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range []struct{ name, field, value string }{
		{"Set-Cookie", "Set-Cookie", "session=secret"},
		{"set-cookie in lower case", "set-cookie", "session=secret"},
		{"private", "Cache-Control", "private, max-age=10"},
		{"no-store", "Cache-Control", "no-store"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := &origin{etag: `"v1"`, cc: "max-age=10", extra: map[string]string{}}
			b := newTestBed(t, s, o, nil)
			b.get(t, "/n").check(t, 200, "MISS", "body-1")
			b.waitStored(t, "/n", "body-1")
			o.set(func(o *origin) {
				if tt.field == "Cache-Control" {
					o.cc = tt.value
					return
				}
				o.extra[tt.field] = tt.value
			})
			b.clock.Advance(11 * time.Second)
			r := b.get(t, "/n")
			r.check(t, 200, "BYPASS", "body-1")
			if got := o.last().Get("If-None-Match"); got != `"v1"` {
				t.Fatalf("If-None-Match = %q, want the stored ETag", got)
			}
			r = b.get(t, "/n", procHeader, "0")
			if r.cache() == "HIT" {
				t.Errorf("the second request was answered from the cache: %v", r)
			}
			if got := r.header.Get("Set-Cookie"); got != "" && r.cache() != "BYPASS" {
				t.Errorf("a cookie reached a request that did not render: %q", got)
			}
			if n := o.renders.Load(); n != 3 {
				t.Errorf("renders = %d, want 3 (each revalidates)", n)
			}
		})
	}
}

// TestMiddleware_revalidateClientConditions: the conditions the handler
// gets are the stored response's, never the client's (which would make a
// 304 meant for one client the shared answer); the client's own
// conditions are answered by the middleware from the freshened response.
func TestMiddleware_revalidateClientConditions(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	o := &origin{etag: `"v1"`, cc: "max-age=10"}
	b := newTestBed(t, s, o, nil)
	b.get(t, "/c").check(t, 200, "MISS", "body-1")
	b.waitStored(t, "/c", "body-1")
	b.clock.Advance(11 * time.Second)
	r := b.get(t, "/c", "If-None-Match", `"v1"`, "If-Modified-Since", "Wed, 01 Jan 2020 00:00:00 GMT", "If-Match", `"x"`)
	if r.status != http.StatusNotModified || r.body != "" {
		t.Errorf("got %v, want a 304 from the freshened response", r)
	}
	if got, want := fmt.Sprint(o.last()), fmt.Sprint(http.Header{"If-None-Match": {`"v1"`}}); got != want {
		t.Errorf("the handler got %s, want %s", got, want)
	}
	b.waitStored(t, "/c", "body-1")
	b.get(t, "/c", "If-None-Match", `"other"`).check(t, 200, "HIT", "body-1")
}

// TestMiddleware_revalidateMustRevalidate: must-revalidate, proxy-
// revalidate and s-maxage responses are kept past their freshness to be
// revalidated, but never served stale: a revalidation that fails is the
// client's answer, not the stored response.
func TestMiddleware_revalidateMustRevalidate(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, cc := range []string{"max-age=10, must-revalidate", "max-age=10, proxy-revalidate", "s-maxage=10", "max-age=10"} {
		t.Run(cc, func(t *testing.T) {
			o := &origin{etag: `"v1"`, cc: cc}
			b := newTestBed(t, s, o, &bedOptions{mw: &middleware.Options{Freshness: middleware.FreshnessPolicy{Stale: time.Minute}}, quiet: true})
			b.get(t, "/m").check(t, 200, "MISS", "body-1")
			b.waitStored(t, "/m", "body-1")
			b.clock.Advance(11 * time.Second)
			o.set(func(o *origin) { o.fail = http.StatusServiceUnavailable })
			if cc == "max-age=10" {
				// Freshness.Stale applies: served stale while the refresh
				// (conditional, failing) runs in the background.
				b.get(t, "/m").check(t, 200, "STALE", "body-1")
				return
			}
			r := b.get(t, "/m")
			r.check(t, http.StatusServiceUnavailable, "BYPASS", "")
			if got := o.last().Get("If-None-Match"); got != `"v1"` {
				t.Errorf("If-None-Match = %q, want the stored ETag", got)
			}
			// The failed revalidation frees its claim after its client
			// is answered; a request that found the claim would wait for
			// it and, told it failed, render for itself.
			ctx := testContext(t, 10*time.Second)
			redistest.WaitFor(t, ctx, "the failed revalidation's claim gone", func() bool {
				keys, err := b.rc.Keys(ctx, b.ns+":*").Result()
				// The failure's marker (NS:{K}:fail) stays a second.
				keys = slices.DeleteFunc(keys, func(k string) bool { return strings.HasSuffix(k, ":fail") })
				return err == nil && len(keys) == 1 // the stored response's
			})
			o.set(func(o *origin) { o.fail = 0 })
			b.get(t, "/m").check(t, 200, "MISS", "body-1") // revalidated now
		})
	}
}

// TestMiddleware_revalidateVary: a variant is revalidated with its own
// validators and the request's values of the Vary headers, and a 304
// freshens that variant only.
func TestMiddleware_revalidateVary(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	var mu sync.Mutex
	var seen []string
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		v := r.Header.Get("X-V")
		mu.Lock()
		seen = append(seen, v+" "+r.Header.Get("If-None-Match"))
		mu.Unlock()
		w.Header().Set("Vary", "X-V")
		w.Header().Set("Cache-Control", "max-age=10")
		w.Header().Set("Etag", `"e-`+v+`"`)
		w.Header().Set("X-Render", strconv.Itoa(int(n)))
		if r.Header.Get("If-None-Match") == `"e-`+v+`"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		fmt.Fprintf(w, "%s-%d", v, n)
	}), nil)
	ctx := testContext(t, 20*time.Second)
	b.get(t, "/v", "X-V", "a").check(t, 200, "MISS", "a-1")
	redistest.WaitFor(t, ctx, "variant a", func() bool { return b.stored(t, "/v", "\nvary X-V: a") })
	b.get(t, "/v", "X-V", "b").check(t, 200, "MISS", "b-2")
	redistest.WaitFor(t, ctx, "variant b", func() bool { return b.stored(t, "/v", "\nvary X-V: b") })
	b.get(t, "/v", "X-V", "b").check(t, 200, "HIT", "b-2")
	b.clock.Advance(11 * time.Second)
	ra := b.get(t, "/v", "X-V", "a")
	ra.check(t, 200, "MISS", "a-1")
	rb := b.get(t, "/v", "X-V", "b")
	rb.check(t, 200, "MISS", "b-2")
	if ra.header.Get("X-Render") != "3" || rb.header.Get("X-Render") != "4" {
		t.Errorf("X-Render = %q, %q, want each variant's own 304 (3, 4)", ra.header.Get("X-Render"), rb.header.Get("X-Render"))
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := fmt.Sprint(seen[2:]), fmt.Sprint([]string{`a "e-a"`, `b "e-b"`}); got != want {
		t.Errorf("revalidations sent %s, want %s", got, want)
	}
}

// TestMiddleware_revalidateOnce: while one request revalidates a stored
// response, every other request for it, in this process and in another,
// waits for that revalidation and gets the freshened response: one
// conditional render in the cluster.
func TestMiddleware_revalidateOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 20*time.Second)
		g := newRenderGate(ctx, 2)
		b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := g.next()
			w.Header().Set("Cache-Control", "max-age=10, must-revalidate")
			w.Header().Set("Etag", `"v1"`)
			w.Header().Set("X-Render", strconv.Itoa(int(n)))
			if r.Header.Get("If-None-Match") == `"v1"` {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			fmt.Fprintf(w, "body-%d", n)
		}), &bedOptions{procs: 2})
		b.get(t, "/o").check(t, 200, "MISS", "body-1")
		b.waitStored(t, "/o", "body-1")
		b.clock.Advance(11 * time.Second)

		first := b.goSend(ctx, "GET", "/o", procHeader, "0")
		redistest.Recv(t, ctx, g.started, "the revalidation")
		var waiters []<-chan sent
		for i := range 4 {
			waiters = append(waiters, b.goSend(ctx, "GET", "/o", procHeader, strconv.Itoa(i%2)))
		}
		redistest.WaitFor(t, ctx, "the waiters", func() bool {
			st := b.stats()
			return st.Misses >= 6 && st.Waits >= 1 // the first render, the revalidation and its four waiters
		})
		g.open()
		r := redistest.Recv(t, ctx, first, "the revalidating request")
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.check(t, 200, "MISS", "body-1")
		for _, ch := range waiters {
			r := redistest.Recv(t, ctx, ch, "a waiter")
			if r.err != nil {
				t.Fatal(r.err)
			}
			r.check(t, 200, "HIT", "body-1")
			if got := r.header.Get("X-Render"); got != "2" {
				t.Errorf("X-Render = %q, want the 304's 2", got)
			}
		}
		if n := g.renders.Load(); n != 2 {
			t.Errorf("renders = %d, want 2", n)
		}
	}, redistest.Redis8, redistest.Cluster)
}

// TestMiddleware_revalidateKeep: how long a response is kept past its
// freshness (and stale window) to be revalidated: Freshness.Revalidate, by
// default its lifetime within [1m, 1h]; not at all without a validator of
// the handler's (a digest ETag is the middleware's own) or with a
// negative Freshness.Revalidate.
func TestMiddleware_revalidateKeep(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range []struct {
		name     string
		etag, cc string
		keep     time.Duration
		want     time.Duration // the server's TTL of the entry
	}{
		{"default, short lifetime", `"v1"`, "max-age=10", 0, 10*time.Second + time.Minute},
		{"default, long lifetime", `"v1"`, "max-age=300", 0, 600 * time.Second},
		{"default, capped", `"v1"`, "max-age=86400", 0, 86400*time.Second + time.Hour},
		{"with a stale window", `"v1"`, "max-age=10, stale-while-revalidate=20", 0, 30*time.Second + time.Minute},
		{"RevalidateTTL", `"v1"`, "max-age=10", 5 * time.Minute, 10*time.Second + 5*time.Minute},
		{"off", `"v1"`, "max-age=10", -1, 10 * time.Second},
		{"no validator of the handler's", "", "max-age=10", 0, 10 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := &origin{etag: tt.etag, cc: tt.cc}
			b := newTestBed(t, s, o, &bedOptions{mw: &middleware.Options{Freshness: middleware.FreshnessPolicy{Revalidate: tt.keep}}})
			b.get(t, "/k").check(t, 200, "MISS", "body-1")
			b.waitStored(t, "/k", "body-1")
			if got := b.ttl(t, "/k"); got > tt.want || got < tt.want-5*time.Second {
				t.Errorf("server TTL = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestMiddleware_ifModifiedSinceDate: a stored response without
// Last-Modified answers If-Modified-Since against its Date (RFC 9111
// 4.3.2).
func TestMiddleware_ifModifiedSinceDate(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var date string
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=100")
		w.Header().Set("Date", date)
		fmt.Fprint(w, "dated")
	}), nil)
	date = b.clock.Now().UTC().Format(http.TimeFormat)
	b.get(t, "/d").check(t, 200, "MISS", "dated")
	b.waitStored(t, "/d", "dated")
	if r := b.get(t, "/d", "If-Modified-Since", date); r.status != http.StatusNotModified {
		t.Errorf("If-Modified-Since the Date: %v, want 304", r)
	}
	earlier := b.clock.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	b.get(t, "/d", "If-Modified-Since", earlier).check(t, 200, "HIT", "dated")
}

// TestMiddleware_revalidateInStaleWindow: within a stale window
// (stale-while-revalidate here) the stale response is served at once and
// the cache's background refresh revalidates it: a 304 freshens it.
func TestMiddleware_revalidateInStaleWindow(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	o := &origin{etag: `"v1"`, cc: "max-age=10, stale-while-revalidate=30", extra: map[string]string{"X-Test": "a"}}
	b := newTestBed(t, s, o, nil)
	b.get(t, "/w").check(t, 200, "MISS", "body-1")
	b.waitStored(t, "/w", "body-1")
	o.set(func(o *origin) { o.extra["X-Test"] = "b-updated" })
	b.clock.Advance(11 * time.Second)
	b.get(t, "/w").check(t, 200, "STALE", "body-1")
	b.waitStored(t, "/w", "b-updated")
	r := b.get(t, "/w")
	r.check(t, 200, "HIT", "body-1")
	if got := r.header.Get("X-Test"); got != "b-updated" {
		t.Errorf("X-Test = %q, want the 304's", got)
	}
	if got := o.last().Get("If-None-Match"); got != `"v1"` {
		t.Errorf("the refresh sent If-None-Match %q, want the stored ETag", got)
	}
	if n := o.renders.Load(); n != 2 {
		t.Errorf("renders = %d, want 2", n)
	}
}

// TestMiddleware_revalidateNoCache: with RevalidateNoCache a no-cache
// response with a validator of the handler's is stored and revalidated on
// every use, never served without that; without a validator, or without
// the option, it is not stored.
func TestMiddleware_revalidateNoCache(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range []struct {
		name   string
		etag   string
		cc     string
		option bool
		stored bool
	}{
		{"no-cache", `"v1"`, "no-cache", true, true},
		{"no-cache with max-age", `"v1"`, "max-age=100, no-cache", true, true},
		{"without a validator", "", "no-cache", true, false},
		{"option off", `"v1"`, "no-cache", false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := &origin{etag: tt.etag, cc: tt.cc}
			b := newTestBed(t, s, o, &bedOptions{mw: &middleware.Options{Freshness: middleware.FreshnessPolicy{RevalidateNoCache: tt.option}}})
			if !tt.stored {
				b.get(t, "/nc").check(t, 200, "BYPASS", "body-1")
				b.waitGone(t, "/nc")
				b.get(t, "/nc").check(t, 200, "BYPASS", "body-2")
				return
			}
			b.get(t, "/nc").check(t, 200, "MISS", "body-1")
			b.waitStored(t, "/nc", "body-1")
			for i := range 3 {
				mark := "use-" + strconv.Itoa(i)
				o.set(func(o *origin) { o.extra = map[string]string{"X-Use": mark} })
				b.get(t, "/nc").check(t, 200, "MISS", "body-1") // revalidated, not a HIT
				if got := o.last().Get("If-None-Match"); got != `"v1"` {
					t.Errorf("use %d sent If-None-Match %q, want the stored ETag", i, got)
				}
				b.waitStored(t, "/nc", mark) // the freshened response is stored
			}
			if n := o.renders.Load(); n != 4 {
				t.Errorf("renders = %d, want 4", n)
			}
		})
	}
}

// TestMiddleware_revalidateOtherRepresentation: a 304 selects the stored
// response only if it names the same representation (RFC 9111 4.3.4): a
// strong ETag other than the stored one's (or a weak one that does not
// match it even weakly), or a Vary on other fields than the stored
// response's, says the handler now has another one, and the stored one
// is not freshened: the middleware renders again without conditions and
// stores that. Before, the old body was freshened and served as current.
func TestMiddleware_revalidateOtherRepresentation(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range []struct {
		name  string
		etag  string            // of the first response
		field map[string]string // of the 304
	}{
		{"strong ETag", `"v1"`, map[string]string{"Etag": `"v2"`}},
		{"weak ETag", `W/"v1"`, map[string]string{"Etag": `W/"v2"`}},
		{"strong ETag against a weak one", `W/"v1"`, map[string]string{"Etag": `"v1"`}},
		{"Vary", `"v1"`, map[string]string{"Etag": `"v1"`, "Vary": "Accept-Language"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			var mu sync.Mutex
			var conditional []bool
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := renders.Add(1)
				mu.Lock()
				conditional = append(conditional, r.Header.Get("If-None-Match") != "")
				mu.Unlock()
				w.Header().Set("Cache-Control", "max-age=10")
				if r.Header.Get("If-None-Match") != "" {
					for k, v := range tt.field {
						w.Header().Set(k, v)
					}
					w.WriteHeader(http.StatusNotModified)
					return
				}
				w.Header().Set("Etag", tt.etag)
				if n > 1 {
					w.Header().Set("Etag", `"v2"`) // no 304 can freshen it with v1 again
				}
				fmt.Fprintf(w, "body-%d", n)
			}), nil)
			b.get(t, "/o").check(t, 200, "MISS", "body-1")
			b.waitStored(t, "/o", "body-1")
			b.clock.Advance(11 * time.Second)
			r := b.get(t, "/o")
			if r.status != 200 || r.body != "body-3" || r.cache() == "HIT" {
				t.Errorf("after the 304: %v, want body-3 rendered without conditions", r)
			}
			mu.Lock()
			defer mu.Unlock()
			if want := []bool{false, true, false}; !slices.Equal(conditional, want) {
				t.Errorf("conditional renders %v, want %v", conditional, want)
			}
		})
	}
}

// TestMiddleware_refreshEndsStored: a response the handler now marks not
// to be shared (private, no-store, a cookie), in a refresh within the
// stale window or in a revalidation (a 304's fields count), ends the
// stored response at once: it is not served again, stale or not. Before,
// the stale-window refresh failed quietly and the old public response
// was served until its window ended.
func TestMiddleware_refreshEndsStored(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range []struct {
		name   string
		etag   string // of the responses; "" for none (a refresh without conditions)
		ignore bool   // the handler answers 200 to its conditions
		field  string // what the refresh's response says
		value  string
		stale  bool // the refresh happens within the stale window
	}{
		{"304 private in the stale window", `"v1"`, false, "Cache-Control", "private, max-age=10", true},
		{"200 no-store in the stale window", `"v1"`, true, "Cache-Control", "no-store", true},
		{"200 Set-Cookie without validators in the stale window", "", false, "Set-Cookie", "s=1", true},
		{"private without validators in the stale window", "", false, "Cache-Control", "private", true},
		{"304 private past the stale window", `"v1"`, false, "Cache-Control", "private, max-age=10", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cc := "max-age=10"
			if tt.stale {
				cc += ", stale-while-revalidate=60"
			}
			o := &origin{etag: tt.etag, cc: cc, extra: map[string]string{}, ignore: tt.ignore}
			b := newTestBed(t, s, o, nil)
			b.get(t, "/e").check(t, 200, "MISS", "body-1")
			b.waitStored(t, "/e", "body-1")
			o.set(func(o *origin) {
				if tt.field == "Cache-Control" {
					o.cc = tt.value
					return
				}
				o.extra[tt.field] = tt.value
			})
			b.clock.Advance(11 * time.Second)
			r := b.get(t, "/e")
			if tt.stale {
				r.check(t, 200, "STALE", "body-1") // served while the refresh runs
			} else {
				r.check(t, 200, "BYPASS", "body-1") // the 304 freshened it for its own client
			}
			b.waitGone(t, "/e")
			r = b.get(t, "/e")
			if r.cache() != "BYPASS" || r.body == "body-1" {
				t.Errorf("after the refresh: %v, want a render of its own", r)
			}
		})
	}
}
