package middleware_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/hotkv/stampede/middleware"
)

// This file tests purging: by tag (Options.Tags, PurgeTag), by URL
// (PurgeURL) and with the PURGE method (Options.Purge).

// tagHandler renders pages that say which render of their path they are
// ("/a #2") and carry the tags its tags map gives the path, in
// Surrogate-Key, and "cdn-<path>" in Cache-Tag; a path in vary varies on
// Accept-Language. It counts renders by path.
type tagHandler struct {
	mu      sync.Mutex
	renders map[string]int
	tags    map[string]string
	vary    map[string]bool
}

func newTagHandler(tags map[string]string) *tagHandler {
	return &tagHandler{renders: map[string]int{}, tags: tags, vary: map[string]bool{}}
}

func (th *tagHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	th.mu.Lock()
	id := r.URL.Path
	if th.vary[r.URL.Path] {
		id += " " + r.Header.Get("Accept-Language")
	}
	th.renders[id]++
	n := th.renders[id]
	th.mu.Unlock()
	if t := th.tags[r.URL.Path]; t != "" {
		w.Header().Set("Surrogate-Key", t)
	}
	w.Header().Set("Cache-Tag", "cdn-"+strings.TrimPrefix(r.URL.Path, "/"))
	if th.vary[r.URL.Path] {
		w.Header().Set("Vary", "Accept-Language")
	}
	fmt.Fprintf(w, "%s #%d", id, n)
}

func (th *tagHandler) count(id string) int {
	th.mu.Lock()
	defer th.mu.Unlock()
	return th.renders[id]
}

func tagOptions() *middleware.Options {
	return &middleware.Options{Tags: middleware.TagPolicy{Headers: []string{"Surrogate-Key", "Cache-Tag"}}}
}

// TestPurgeTag_processes: three processes with near caches hold tagged
// pages (one with two Vary variants); a PurgeTag in one of them makes
// every page of the tag, every variant, a miss in all three from its
// return on, each rendered once more for the cluster; pages of other
// tags stay hits. On Redis 8.6, Valkey 9 and the Cluster.
func TestPurgeTag_processes(t *testing.T) {
	for _, kind := range []redistest.Kind{redistest.Redis8, redistest.Valkey, redistest.Cluster} {
		t.Run(string(kind), func(t *testing.T) {
			s := redistest.Shared(t, kind)
			th := newTagHandler(map[string]string{"/a": "all a", "/b": "all  b", "/c": "c"})
			th.vary["/b"] = true
			b := nearBed(t, s, th, &bedOptions{procs: 3, mw: tagOptions()})
			ctx := testContext(t, 60*time.Second)
			pages := []struct{ path, lang, id string }{
				{"/a", "", "/a"}, {"/b", "en", "/b en"}, {"/b", "nl", "/b nl"}, {"/c", "", "/c"},
			}
			hdr := func(proc int, lang string) []string {
				h := []string{procHeader, fmt.Sprint(proc)}
				if lang != "" {
					h = append(h, "Accept-Language", lang)
				}
				return h
			}
			for _, p := range pages {
				r := b.get(t, p.path, hdr(0, p.lang)...)
				r.check(t, 200, "MISS", p.id+" #1")
				if v := r.header.Get("Surrogate-Key") + r.header.Get("Cache-Tag"); v != "" {
					t.Errorf("%s: tag fields reached the client: %q", p.id, v)
				}
				redistest.WaitFor(t, ctx, "the render of "+p.id+" stored", func() bool {
					return b.get(t, p.path, hdr(0, p.lang)...).cache() == "HIT"
				})
				for proc := range 3 {
					b.nearHit(t, ctx, proc, p.path, hdr(proc, p.lang)[2:]...).check(t, 200, "HIT", p.id+" #1")
				}
			}

			if err := b.mws[1].PurgeTag(ctx, "all"); err != nil {
				t.Fatal(err)
			}
			for _, p := range pages {
				want := p.id + " #2"
				if p.path == "/c" {
					want = p.id + " #1"
				}
				// At once in the process that purged; in the others as
				// soon as the server's invalidation of the tag's record
				// reaches their near caches (docs/near-cache.md).
				r := b.get(t, p.path, hdr(1, p.lang)...)
				if r.status != 200 || r.body != want {
					t.Errorf("%s from the purging process: %v, want %q", p.id, r, want)
				}
				for _, proc := range []int{0, 2} {
					redistest.WaitFor(t, ctx, p.id+" purged in process "+fmt.Sprint(proc), func() bool {
						return b.get(t, p.path, hdr(proc, p.lang)...).body == want
					})
				}
				if n := th.count(p.id); n != map[bool]int{true: 1, false: 2}[p.path == "/c"] {
					t.Errorf("%s rendered %d times", p.id, n)
				}
			}
			// The new renders are stored: hits again, in every process.
			for _, p := range pages[:3] {
				for proc := range 3 {
					redistest.WaitFor(t, ctx, "a hit of the new "+p.id, func() bool {
						r := b.get(t, p.path, hdr(proc, p.lang)...)
						return r.cache() == "HIT" && r.body == p.id+" #2"
					})
				}
				if n := th.count(p.id); n != 2 {
					t.Errorf("%s rendered %d times, want 2", p.id, n)
				}
			}
			// Cache-Tag's tags purge too.
			if err := b.mws[2].PurgeTag(ctx, "cdn-c"); err != nil {
				t.Fatal(err)
			}
			b.get(t, "/c", hdr(2, "")...).check(t, 200, "MISS", "/c #2")
		})
	}
}

// TestPurgeTag_duringRender: a purge while a page of the tag renders
// (which may have read the data from before the purge) keeps that render
// out of the cache: its client gets it, and the cache's load renders
// once more, which the requests that waited, in any process, and every
// later one get.
func TestPurgeTag_duringRender(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 30*time.Second)
		gate := newRenderGate(ctx, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := gate.next()
			w.Header().Set("Surrogate-Key", "t")
			fmt.Fprintf(w, "render %d", n)
		})
		b := newTestBed(t, s, h, &bedOptions{procs: 2, mw: tagOptions()})
		first := b.goSend(ctx, http.MethodGet, "/p", procHeader, "0")
		redistest.Recv(t, ctx, gate.started, "the first render")
		waiter := b.goSend(ctx, http.MethodGet, "/p", procHeader, "1")
		redistest.WaitFor(t, ctx, "the other process waiting for the render", func() bool {
			return b.caches[1].Stats().Waits >= 1
		})
		if err := b.mws[1].PurgeTag(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		gate.open()
		got := redistest.Recv(t, ctx, first, "the first client's answer")
		if got.err != nil {
			t.Fatal(got.err)
		}
		got.check(t, 200, "BYPASS", "render 1")
		got = redistest.Recv(t, ctx, waiter, "the waiter's answer")
		if got.err != nil {
			t.Fatal(got.err)
		}
		got.check(t, 200, "HIT", "render 2")
		b.get(t, "/p", procHeader, "0").check(t, 200, "HIT", "render 2")
		if n := gate.renders.Load(); n != 2 {
			t.Errorf("%d renders, want 2", n)
		}
	})
}

// TestPurgeTag_recordGone: a page whose tag's record is gone (expired,
// evicted, deleted) counts as purged: rendered once more.
func TestPurgeTag_recordGone(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	th := newTagHandler(map[string]string{"/a": "x"})
	b := newTestBed(t, s, th, &bedOptions{mw: tagOptions()})
	b.get(t, "/a").check(t, 200, "MISS", "/a #1")
	b.waitStored(t, "/a", "/a #1")
	b.get(t, "/a").check(t, 200, "HIT", "/a #1")
	n, err := b.rc.Del(context.Background(), b.valueKeyOf("tag\nx")).Result()
	if err != nil || n != 1 {
		t.Fatalf("deleting the record: %d, %v", n, err)
	}
	b.get(t, "/a").check(t, 200, "MISS", "/a #2")
	b.waitStored(t, "/a", "/a #2")
	b.get(t, "/a").check(t, 200, "HIT", "/a #2")
}

// TestTags_fields: the tag fields never reach clients, whatever answers
// them (a hit, a miss, a response not stored, a bypass), unless
// Tags.Keep; a page with more tags than the bound, or a tag too long, is
// not stored.
func TestTags_fields(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renders.Add(1)
		switch r.URL.Path {
		case "/many":
			var tags []string
			for i := range 129 {
				tags = append(tags, fmt.Sprint("t", i))
			}
			w.Header().Set("Surrogate-Key", strings.Join(tags, " "))
		case "/long":
			w.Header().Set("Surrogate-Key", strings.Repeat("x", 1025))
		case "/private":
			w.Header().Set("Cache-Control", "private")
			w.Header()["surrogate-key"] = []string{"lower"} // set in another letter case
		default:
			w.Header().Add("Surrogate-Key", "a b")
			w.Header().Add("Surrogate-Key", "c")
		}
		fmt.Fprint(w, r.Method+" "+r.URL.Path)
	})
	for _, keep := range []bool{false, true} {
		t.Run(fmt.Sprint("keep=", keep), func(t *testing.T) {
			o := tagOptions()
			o.Tags.Keep = keep
			b := newTestBed(t, s, h, &bedOptions{mw: o})
			sent := func(r reply) string { return strings.Join(r.header.Values("Surrogate-Key"), "|") }
			want := ""
			if keep {
				want = "a b|c"
			}
			r := b.get(t, "/p")
			r.check(t, 200, "MISS", "GET /p")
			b.waitStored(t, "/p", "GET /p")
			if got := sent(r); got != want {
				t.Errorf("miss: Surrogate-Key %q, want %q", got, want)
			}
			r = b.get(t, "/p")
			r.check(t, 200, "HIT", "GET /p")
			if got := sent(r); got != want {
				t.Errorf("hit: Surrogate-Key %q, want %q", got, want)
			}
			r = b.do(t, http.MethodPost, "/p")
			if got := sent(r); got != want {
				t.Errorf("bypass: Surrogate-Key %q, want %q", got, want)
			}
			r = b.get(t, "/private")
			if got := strings.Join(r.header.Values("Surrogate-Key"), "|"); keep == (got == "") {
				t.Errorf("a response not stored: Surrogate-Key %q (keep %v)", got, keep)
			}
			for _, path := range []string{"/many", "/long"} {
				before := renders.Load()
				b.get(t, path).check(t, 200, "BYPASS", "GET "+path)
				b.waitGone(t, path)
				r, _ := b.getAfterUnstored(t, path)
				r.check(t, 200, "BYPASS", "GET "+path)
				if n := renders.Load() - before; n < 2 {
					t.Errorf("%s: %d renders for two requests: it was stored", path, n)
				}
			}
		})
	}
}

// TestPurgeURL: PurgeURL removes the page of a URL, every Vary variant,
// in every process, whatever the order of its query's parameters; bad
// URLs are refused with an error naming them.
func TestPurgeURL(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		th := newTagHandler(nil)
		th.vary["/v"] = true
		b := newTestBed(t, s, th, &bedOptions{procs: 3})
		ctx := testContext(t, 30*time.Second)
		for _, lang := range []string{"en", "nl"} {
			b.get(t, "/v?a=1&b=2", "Accept-Language", lang).check(t, 200, "MISS", "/v "+lang+" #1")
			redistest.WaitFor(t, ctx, "a hit of "+lang, func() bool {
				return b.get(t, "/v?a=1&b=2", "Accept-Language", lang).cache() == "HIT"
			})
		}
		b.get(t, "/other").check(t, 200, "MISS", "/other #1")
		b.waitStored(t, "/other", "/other #1")
		if err := b.mws[2].PurgeURL(ctx, b.srv.URL+"/v?b=2&a=1", nil); err != nil {
			t.Fatal(err)
		}
		for i, lang := range []string{"en", "nl"} {
			b.get(t, "/v?a=1&b=2", "Accept-Language", lang, procHeader, fmt.Sprint(i)).check(t, 200, "MISS", "/v "+lang+" #2")
		}
		b.get(t, "/other", procHeader, "1").check(t, 200, "HIT", "/other #1")
		for _, bad := range []string{"/v", "ftp://x/", "http://u@host/", "http://%zz", "mailto:a@b"} {
			err := b.mws[0].PurgeURL(ctx, bad, nil)
			if !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), "PurgeURL") {
				t.Errorf("PurgeURL(%q) = %v; want an invalid-argument error naming PurgeURL", bad, err)
			}
		}
	})
}

// TestPurgeMethod: with Options.Purge, a PURGE that Authorize allows
// removes its URL's page, or the pages of the tags it lists, in every
// process, and says so in the status header; one it refuses gets 403 and
// removes nothing; the handler never sees either.
func TestPurgeMethod(t *testing.T) {
	s := redistest.Shared(t, redistest.Valkey)
	th := newTagHandler(map[string]string{"/t1": "red", "/t2": "red", "/u": "blue"})
	o := tagOptions()
	o.Purge = &middleware.PurgePolicy{Authorize: func(r *http.Request) bool { return r.Header.Get("X-Purge-Key") == "secret" }}
	b := newTestBed(t, s, th, &bedOptions{procs: 2, mw: o})
	for _, p := range []string{"/t1", "/t2", "/u"} {
		b.get(t, p).check(t, 200, "MISS", p+" #1")
		b.waitStored(t, p, p+" #1")
	}
	r := b.do(t, "PURGE", "/u", procHeader, "1", "X-Purge-Key", "guess")
	if r.status != http.StatusForbidden || r.cache() != "PURGE; detail=purge-forbidden" {
		t.Errorf("unauthorised PURGE: %v", r)
	}
	b.get(t, "/u").check(t, 200, "HIT", "/u #1")

	r = b.do(t, "PURGE", "/u", procHeader, "1", "X-Purge-Key", "secret")
	if r.status != http.StatusOK || r.cache() != "PURGE; detail=purged-url" {
		t.Errorf("PURGE of a URL: %v", r)
	}
	b.get(t, "/u").check(t, 200, "MISS", "/u #2")

	r = b.do(t, "PURGE", "/", procHeader, "1", "X-Purge-Key", "secret", "Surrogate-Key", "red green")
	if r.status != http.StatusOK || r.cache() != "PURGE; detail=purged-tags" || r.body != "purged 2 tags\n" {
		t.Errorf("PURGE of tags: %v", r)
	}
	b.get(t, "/t1").check(t, 200, "MISS", "/t1 #2")
	b.get(t, "/t2").check(t, 200, "MISS", "/t2 #2")

	r = b.do(t, "PURGE", "/", "X-Purge-Key", "secret", "Surrogate-Key", strings.Repeat("x", 1025))
	if r.status != http.StatusBadRequest {
		t.Errorf("PURGE of a tag too long: %v", r)
	}
	if n := th.count("/"); n != 0 {
		t.Errorf("the handler saw %d PURGE requests", n)
	}
}

// TestPurgeMethod_statusHeader: a PURGE's answer is the middleware's own,
// so it carries no Cache-Status (RFC 9211 2: not on locally generated
// responses); it says what happened in the status header, "PURGE;
// detail=" and the detail, and with StatusHeader "-" nowhere (issue 39).
func TestPurgeMethod_statusHeader(t *testing.T) {
	s := redistest.Shared(t, redistest.Valkey)
	for _, sh := range []string{"", "X-Edge", "-"} {
		t.Run("StatusHeader="+sh, func(t *testing.T) {
			o := tagOptions()
			o.StatusHeader = sh
			o.Purge = &middleware.PurgePolicy{Authorize: func(r *http.Request) bool { return r.Header.Get("X-Purge-Key") == "secret" }}
			b := newTestBed(t, s, newTagHandler(nil), &bedOptions{mw: o})
			name := map[string]string{"": "X-Cache", "X-Edge": "X-Edge", "-": ""}[sh]
			for _, tc := range []struct {
				hdr    []string
				status int
				detail string
			}{
				{[]string{"X-Purge-Key", "guess"}, http.StatusForbidden, "purge-forbidden"},
				{[]string{"X-Purge-Key", "secret"}, http.StatusOK, "purged-url"},
				{[]string{"X-Purge-Key", "secret", "Surrogate-Key", "red"}, http.StatusOK, "purged-tags"},
				{[]string{"X-Purge-Key", "secret", "Surrogate-Key", strings.Repeat("x", 1025)}, http.StatusBadRequest, "purge-invalid"},
			} {
				r := b.do(t, "PURGE", "/u", tc.hdr...)
				if r.status != tc.status || r.header["Cache-Status"] != nil {
					t.Errorf("PURGE (%s): %v, Cache-Status %q; want %d and none", tc.detail, r, r.header["Cache-Status"], tc.status)
				}
				for _, h := range []string{"X-Cache", "X-Edge"} {
					want := ""
					if h == name {
						want = "PURGE; detail=" + tc.detail
					}
					if got := r.header.Get(h); got != want {
						t.Errorf("PURGE (%s): %s %q, want %q", tc.detail, h, got, want)
					}
				}
			}
		})
	}
}

// TestPurgeMethod_emptyTags: a PURGE with a tag field (Options.Tags.Headers)
// that lists no tag purges nothing and is answered 400 (purge-invalid): it
// never falls back to purging its own URL, which only a PURGE without any
// tag field does (issue 39).
func TestPurgeMethod_emptyTags(t *testing.T) {
	s := redistest.Shared(t, redistest.Valkey)
	th := newTagHandler(map[string]string{"/": "home"})
	o := tagOptions()
	o.Purge = &middleware.PurgePolicy{Authorize: func(*http.Request) bool { return true }}
	b := newTestBed(t, s, th, &bedOptions{mw: o})
	b.get(t, "/").check(t, 200, "MISS", "/ #1")
	b.waitStored(t, "/", "/ #1")
	for _, hdr := range [][]string{
		{"Surrogate-Key", ""},
		{"Surrogate-Key", "   "},
		{"Cache-Tag", " , ,"},
		{"Surrogate-Key", "", "Cache-Tag", ""},
	} {
		r := b.do(t, "PURGE", "/", hdr...)
		if r.status != http.StatusBadRequest || r.body != "no tags listed\n" || !strings.Contains(r.header.Get("X-Cache"), "detail=purge-invalid") {
			t.Errorf("PURGE / with %q: %v, X-Cache %q; want 400 purge-invalid", hdr, r, r.header.Get("X-Cache"))
		}
		b.get(t, "/").check(t, 200, "HIT", "/ #1")
	}
	r := b.do(t, "PURGE", "/")
	if r.status != http.StatusOK {
		t.Errorf("PURGE / without a tag field: %v", r)
	}
	b.get(t, "/").check(t, 200, "MISS", "/ #2")
}

// TestPurgeURL_schemes: behind a balancer that terminates TLS a page is
// stored under http (the request has no TLS), and an https URL, as
// clients know it, purges it; both ways round, with the default port
// written or not, and the same for a PURGE request: a purge removes the
// page under both schemes (issue 39).
func TestPurgeURL_schemes(t *testing.T) {
	s := redistest.Shared(t, redistest.Valkey)
	th := newTagHandler(nil)
	o := &middleware.Options{Purge: &middleware.PurgePolicy{Authorize: func(*http.Request) bool { return true }}}
	tlsOn := func(next http.Handler) http.Handler { // as if TLS ended here, for requests that say so
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Test-TLS") != "" {
				r.TLS = &tls.ConnectionState{}
			}
			next.ServeHTTP(w, r)
		})
	}
	b := newTestBed(t, s, th, &bedOptions{mw: o, wrap: tlsOn})
	ctx := testContext(t, 30*time.Second)
	host := strings.TrimPrefix(b.srv.URL, "http://")
	for i, tc := range []struct {
		what  string
		hdr   []string // of the request that stores the page
		purge func(path string) error
	}{
		{"PurgeURL https, page from http", nil, func(path string) error { return b.mws[0].PurgeURL(ctx, "https://"+host+path+"?a=1", nil) }},
		{"PurgeURL http, page from https", []string{"X-Test-TLS", "1"}, func(path string) error { return b.mws[0].PurgeURL(ctx, "http://"+host+path+"?a=1", nil) }},
		{"PurgeURL https, page from http with Host example.com", []string{"Host", "example.com"}, func(path string) error {
			return b.mws[0].PurgeURL(ctx, "https://example.com"+path+"?a=1", nil)
		}},
		{"PurgeURL https with :443, page from http with Host example.com", []string{"Host", "example.com"}, func(path string) error {
			return b.mws[0].PurgeURL(ctx, "https://example.com:443"+path+"?a=1", nil)
		}},
		{"PurgeURL https, page from http with Host example.com:443", []string{"Host", "example.com:443"}, func(path string) error {
			return b.mws[0].PurgeURL(ctx, "https://example.com"+path+"?a=1", nil)
		}},
		{"PURGE over http, page from https", []string{"X-Test-TLS", "1"}, func(path string) error {
			if r := b.do(t, "PURGE", path+"?a=1"); r.status != http.StatusOK {
				return fmt.Errorf("PURGE: %v", r)
			}
			return nil
		}},
		{"PURGE over https, page from http", nil, func(path string) error {
			if r := b.do(t, "PURGE", path+"?a=1", "X-Test-TLS", "1"); r.status != http.StatusOK {
				return fmt.Errorf("PURGE: %v", r)
			}
			return nil
		}},
	} {
		path := fmt.Sprintf("/p%d", i)
		b.get(t, path+"?a=1", tc.hdr...).check(t, 200, "MISS", path+" #1")
		b.get(t, path+"?a=1", tc.hdr...).check(t, 200, "HIT", path+" #1")
		if err := tc.purge(path); err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		b.get(t, path+"?a=1", tc.hdr...).check(t, 200, "MISS", path+" #2")
	}
}

// workerServeTagged serves pages tagged "all" (Surrogate-Key) through a
// middleware whose cache has a near cache, each render counted with INCR
// across processes and saying its number; POST /_purge purges the tag
// in this process.
func workerServeTagged() int {
	rc := redistest.WorkerClient()
	defer rc.Close()
	c, err := cache.New(rc, &cache.Options{Namespace: os.Getenv("MWTEST_NS"), Near: &cache.Near{MaxEntries: 1000}})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	defer c.Close()
	for deadline := time.Now().Add(20 * time.Second); !c.NearActive(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			fmt.Fprintln(os.Stderr, "worker: the near cache did not become active")
			return 1
		}
	}
	m, err := middleware.New(c, tagOptions())
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	counter := os.Getenv("MWTEST_COUNTER")
	cached := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := rc.Incr(r.Context(), counter).Result()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Surrogate-Key", "all")
		fmt.Fprintf(w, "render %d", n)
	}))
	return listenAndServe(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_purge" {
			if err := m.PurgeTag(r.Context(), "all"); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
			return
		}
		cached.ServeHTTP(w, r)
	}))
}

// TestPurgeTag_osProcesses: three OS processes, each with its own near
// cache, hold a tagged page; a PurgeTag in one makes it a miss there at
// once and gone from the other two as soon as the server's invalidation
// reaches them, with one render for the cluster after the purge.
func TestPurgeTag_osProcesses(t *testing.T) {
	redistest.Long(t)
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 60*time.Second)
		rc := s.Client(t)
		ns, counter := "mw"+strings.ReplaceAll(redistest.Key(t, "")[5:], "/", "."), redistest.Key(t, "renders")
		urls := spawnServers(t, ctx, s, 3, "serveTagged", "MWTEST_NS="+ns, "MWTEST_COUNTER="+counter)
		get := func(u string) (string, string) {
			t.Helper()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u+"/p", nil)
			req.Host = "shop.example"
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			b, _ := io.ReadAll(res.Body)
			if v := res.Header.Get("Surrogate-Key"); v != "" {
				t.Errorf("the tag field reached the client: %q", v)
			}
			return string(b), res.Header.Get("X-Cache")
		}
		for _, u := range urls {
			redistest.WaitFor(t, ctx, "a hit of render 1 at "+u, func() bool {
				body, xc := get(u)
				return body == "render 1" && xc == "HIT"
			})
		}
		res, err := http.Post(urls[1]+"/_purge", "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("purge: %s", res.Status)
		}
		if body, xc := get(urls[1]); body != "render 2" || xc != "MISS" {
			t.Errorf("the purging process after the purge: %s %q, want MISS \"render 2\"", xc, body)
		}
		for _, u := range []string{urls[0], urls[2]} {
			redistest.WaitFor(t, ctx, "render 2 at "+u, func() bool {
				body, _ := get(u)
				return body == "render 2"
			})
		}
		if n := renderCount(t, ctx, rc, counter); n != 2 {
			t.Errorf("%d renders, want 2: one before the purge, one after it for the cluster", n)
		}
	}, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestTags_recordLife: a tag record that a render made lives twice as
// long as its page is kept, at least a minute and at most Tags.Lifetime,
// so that tags built from request input cannot fill the server with
// records that outlive their pages by a day; PurgeTag's live
// Tags.Lifetime.
func TestTags_recordLife(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 10*time.Second)
	var cc atomic.Value
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", cc.Load().(string))
		w.Header().Set("Surrogate-Key", strings.TrimPrefix(r.URL.Path, "/"))
		fmt.Fprint(w, "page")
	})
	b := newTestBed(t, s, h, &bedOptions{mw: tagOptions()})
	for _, tc := range []struct {
		tag, cc  string
		min, max time.Duration
	}{
		{"short", "max-age=10", 55 * time.Second, time.Minute},
		{"hour", "max-age=3600", 2*time.Hour - 5*time.Second, 2 * time.Hour},
		{"day", "max-age=86400", 24*time.Hour - 5*time.Second, 24 * time.Hour},
	} {
		cc.Store(tc.cc)
		b.get(t, "/"+tc.tag).check(t, 200, "MISS", "page")
		got, err := b.rc.PTTL(ctx, b.valueKeyOf("tag\n"+tc.tag)).Result()
		if err != nil || got < tc.min || got > tc.max {
			t.Errorf("record of a page with %s lives %v (%v); want %v to %v", tc.cc, got, err, tc.min, tc.max)
		}
	}
	if err := b.mws[0].PurgeTag(ctx, "short"); err != nil {
		t.Fatal(err)
	}
	if got, err := b.rc.PTTL(ctx, b.valueKeyOf("tag\nshort")).Result(); err != nil || got < 24*time.Hour-5*time.Second {
		t.Errorf("record after PurgeTag lives %v (%v); want Tags.Lifetime, 24h", got, err)
	}
}
