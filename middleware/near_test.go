package middleware_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

// This file tests the middleware over caches with a near cache
// (cache.Options.Near): hits answered from process memory share one
// decoded response, and a page changed by one process stops being served
// by the others.

// nearBed is newTestBed with a near cache in every pair's Cache (each on
// a client of its own, as newTestBed makes them), once every near cache is
// active.
func nearBed(t *testing.T, s *redistest.Server, h http.Handler, o *bedOptions) *testBed {
	t.Helper()
	if o == nil {
		o = &bedOptions{}
	}
	var co cache.Options
	if o.cache != nil {
		co = *o.cache
	}
	co.Near = &cache.Near{MaxEntries: 1000}
	o.cache = &co
	b := newTestBed(t, s, h, o)
	ctx := testContext(t, 30*time.Second)
	for _, c := range b.caches {
		redistest.WaitFor(t, ctx, "the near cache active", c.NearActive)
	}
	return b
}

// nearHit sends GETs of path to proc until one is answered from proc's
// near cache, and returns that reply.
func (b *testBed) nearHit(t *testing.T, ctx context.Context, proc int, path string, hdr ...string) reply {
	t.Helper()
	c := b.caches[proc]
	var r reply
	redistest.WaitFor(t, ctx, "a near-cache hit of "+path, func() bool {
		before := c.Stats().NearHits
		r = b.get(t, path, append([]string{procHeader, fmt.Sprint(proc)}, hdr...)...)
		return c.Stats().NearHits > before
	})
	return r
}

// scribbler stands for an outer middleware that writes into the header
// values it finds (in place, putting back what was there) when the
// response's header is written: harmless when the values are the
// response's own, a data race (and wrong answers) when they are shared
// with other responses.
type scribbler struct{ http.ResponseWriter }

func (s scribbler) WriteHeader(code int) {
	for _, vs := range s.Header() {
		for i, v := range vs {
			vs[i] = strings.Clone(v)
		}
	}
	s.ResponseWriter.WriteHeader(code)
}

// Many concurrent requests answered from the near cache, which hands each
// of them the same decoded response: plain GETs, HEADs, conditional
// requests answered 304 or 200, and variants of a page that varies. Every
// answer is the stored response, byte for byte; the race detector sees
// any write to the shared response (by the middleware, or through it by
// an outer middleware that writes into the header values it is given).
func TestNear_sharedResponses(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 2*time.Minute)
	lastMod := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	page := bytes.Repeat([]byte("a page served from the near cache\n"), 100)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/page":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Last-Modified", lastMod)
			w.Header()["X-Multi"] = []string{"one", "two", "three"}
			_, _ = w.Write(page)
		case "/lang":
			w.Header().Set("Vary", "Accept-Language")
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = fmt.Fprintf(w, "the page in %q\n", r.Header.Get("Accept-Language"))
		default:
			http.NotFound(w, r)
		}
	})
	b := nearBed(t, s, h, &bedOptions{wrap: func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { next.ServeHTTP(scribbler{w}, r) })
	}})
	b.client.Transport.(*http.Transport).MaxIdleConnsPerHost = 16

	// Render each page and variant, then wait until it is served from
	// the near cache.
	b.get(t, "/page").check(t, 200, "MISS", string(page))
	b.get(t, "/lang", "Accept-Language", "en").check(t, 200, "MISS", "the page in \"en\"\n")
	b.get(t, "/lang", "Accept-Language", "de").check(t, 200, "MISS", "the page in \"de\"\n")
	b.nearHit(t, ctx, 0, "/page")
	b.nearHit(t, ctx, 0, "/lang", "Accept-Language", "en")
	b.nearHit(t, ctx, 0, "/lang", "Accept-Language", "de")

	// What the server holds, read by a Cache without a near cache.
	verify, err := cache.New(s.Client(t), &cache.Options{Namespace: b.ns, Now: b.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = verify.Close() })
	stored := func(target string, vary ...string) storedResponse {
		resp, err := cache.Get[storedResponse](ctx, verify, b.userKey(target, vary...))
		if err != nil {
			t.Fatalf("the stored response for %s%q: %v", target, vary, err)
		}
		return resp
	}
	pageResp := stored("/page")
	en := stored("/lang", "\nvary Accept-Language: en")
	de := stored("/lang", "\nvary Accept-Language: de")
	if !bytes.Equal(pageResp.Body, page) {
		t.Fatalf("stored body %q, want the page", pageResp.Body)
	}

	type request struct {
		name, method, path string
		hdr                []string
		resp               storedResponse
		status             int // 200 or 304
	}
	requests := []request{
		{"GET", http.MethodGet, "/page", nil, pageResp, 200},
		{"HEAD", http.MethodHead, "/page", nil, pageResp, 200},
		{"If-None-Match", http.MethodGet, "/page", []string{"If-None-Match", pageResp.Header.Get("Etag")}, pageResp, 304},
		{"If-None-Match other", http.MethodGet, "/page", []string{"If-None-Match", `"other", W/"another"`}, pageResp, 200},
		{"If-Modified-Since", http.MethodGet, "/page", []string{"If-Modified-Since", lastMod}, pageResp, 304},
		{"variant en", http.MethodGet, "/lang", []string{"Accept-Language", "en"}, en, 200},
		{"variant de", http.MethodGet, "/lang", []string{"Accept-Language", "de"}, de, 200},
		{"variant de If-None-Match", http.MethodGet, "/lang", []string{"Accept-Language", "de", "If-None-Match", de.Header.Get("Etag")}, de, 304},
		{"variant en, de's ETag", http.MethodGet, "/lang", []string{"Accept-Language", "en", "If-None-Match", de.Header.Get("Etag")}, en, 200},
	}
	// check says how got differs from the answer to q, if it does.
	check := func(q request, got reply) error {
		body := string(q.resp.Body)
		if q.status == 304 || q.method == http.MethodHead {
			body = ""
		}
		if got.status != q.status || got.body != body || got.cache() != "HIT" || !strings.HasPrefix(got.header.Get("Cache-Status"), "stampede; hit; ttl=") || got.header.Get("Age") == "" {
			return fmt.Errorf("%s: got %v (Cache-Status %q, Age %q), want %d HIT with %d bytes",
				q.name, got, got.header.Get("Cache-Status"), got.header.Get("Age"), q.status, len(body))
		}
		for name, want := range q.resp.Header {
			if name == "Content-Length" || name == "Content-Type" && q.status == 304 {
				continue // not sent with a 304 (net/http drops them); Content-Length read into ContentLength
			}
			if g := got.header[name]; !slices.Equal(g, want) {
				return fmt.Errorf("%s: %s is %q, want %q", q.name, name, g, want)
			}
		}
		return nil
	}

	const clients, each = 8, 60
	near := b.caches[0].Stats().NearHits
	errs := make(chan error, clients)
	for i := range clients {
		go func() {
			for j := range each {
				q := requests[(i+j)%len(requests)]
				got, err := b.send(ctx, q.method, q.path, q.hdr...)
				if err == nil {
					err = check(q, got)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range clients {
		if err := redistest.Recv(t, ctx, errs, "a client"); err != nil {
			t.Error(err)
		}
	}
	// Near hits stop only while the near cache is not trusted (its
	// tracking connection was slow to answer a ping), so most are near.
	hits := b.caches[0].Stats().NearHits - near
	if hits == 0 {
		t.Errorf("none of %d requests was answered from the near cache", clients*each)
	}
	t.Logf("%d of %d requests answered from the near cache", hits, clients*each)
}

// Two processes (two Middleware+Cache pairs, each Cache on a client of its
// own and with a near cache) on one server: a page in B's near cache that
// A renders again (a client's no-cache), deletes (cache.Delete of the
// page's key) or refreshes once it is stale stops being served by B as
// soon as B has received the server's invalidation.
func TestNear_coherence(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 2*time.Minute)
		var version atomic.Int64
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = fmt.Fprintf(w, "body=v%d;", version.Add(1))
		})
		b := nearBed(t, s, h, &bedOptions{procs: 2, mw: &middleware.Options{
			Freshness: middleware.FreshnessPolicy{Fresh: time.Minute, Stale: time.Hour}, AllowNoCache: true,
		}})
		a, bc := b.caches[0], b.caches[1]
		const A, B = "0", "1"
		body := func(v int) string { return fmt.Sprintf("body=v%d;", v) }

		// changed waits until the server holds want and B has received an
		// invalidation since before; B must then serve want, a HIT. (An
		// invalidation of an earlier write may be the one that counts:
		// it too drops B's entry, and the server holds want already.)
		changed := func(what string, before uint64, want string) {
			t.Helper()
			b.waitStored(t, "/c", want)
			redistest.WaitFor(t, ctx, "B's invalidation after "+what, func() bool {
				return bc.Stats().NearInvalidations > before
			})
			b.get(t, "/c", procHeader, B).check(t, 200, "HIT", want)
		}

		b.get(t, "/c", procHeader, A).check(t, 200, "MISS", body(1))
		b.nearHit(t, ctx, 1, "/c").check(t, 200, "HIT", body(1))

		// A renders again for a client's no-cache and stores it.
		before := bc.Stats().NearInvalidations
		b.get(t, "/c", procHeader, A, "Cache-Control", "no-cache").check(t, 200, "MISS", body(2))
		changed("A's no-cache render", before, body(2))
		b.nearHit(t, ctx, 1, "/c").check(t, 200, "HIT", body(2))

		// A deletes the page: B renders it again.
		before = bc.Stats().NearInvalidations
		if err := a.Delete(ctx, b.userKey("/c")); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, ctx, "B's invalidation after A's Delete", func() bool {
			return bc.Stats().NearInvalidations > before
		})
		b.get(t, "/c", procHeader, B).check(t, 200, "MISS", body(3))
		b.waitStored(t, "/c", body(3))
		b.nearHit(t, ctx, 1, "/c").check(t, 200, "HIT", body(3))

		// The page goes stale: A serves it and refreshes it in the
		// background; B then serves the refreshed page.
		b.clock.Advance(2 * time.Minute)
		before = bc.Stats().NearInvalidations
		b.get(t, "/c", procHeader, A).check(t, 200, "STALE", body(3))
		changed("A's refresh", before, body(4))
		if n := version.Load(); n != 4 {
			t.Errorf("%d renders, want 4", n)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}
