package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

// This file tests soft purges (SoftPurgeURL, SoftPurgeTag, PURGE with
// Fastly-Soft-Purge).

// etagPage renders "render N" with ETag "v1", Cache-Control cc and the
// tag "t" (Surrogate-Key); a conditional request whose If-None-Match is
// "v1" is answered 304 and counted in conditional. With fail set it
// answers 500. Conditional renders wait for release to close (nil: they
// do not).
type etagPage struct {
	cc          string
	renders     atomic.Int32
	conditional atomic.Int32
	fail        atomic.Bool
	started     chan struct{}
	release     chan struct{}
	ctx         context.Context
}

func newETagPage(ctx context.Context, cc string, hold bool) *etagPage {
	p := &etagPage{cc: cc, ctx: ctx, started: make(chan struct{}, 8)}
	if hold {
		p.release = make(chan struct{})
	}
	return p
}

func (p *etagPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := p.renders.Add(1)
	cond := r.Header.Get("If-None-Match") == `"v1"`
	if cond {
		p.conditional.Add(1)
		p.started <- struct{}{}
		if p.release != nil {
			block(p.ctx, p.release)
		}
	}
	if p.fail.Load() {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.Header().Set("Cache-Control", p.cc)
	w.Header().Set("ETag", `"v1"`)
	w.Header().Set("Surrogate-Key", "t")
	if cond {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	fmt.Fprintf(w, "render %d", n)
}

const swrPage = "max-age=3600, stale-while-revalidate=3600"

// softBed is a bed of three processes in front of page, with tags and
// PURGE (authorised by "X-Purge-Key: secret"), holding /p as rendered
// once and seen by every process.
func softBed(t *testing.T, s *redistest.Server, page *etagPage, o *middleware.Options) *testBed {
	t.Helper()
	if o == nil {
		o = &middleware.Options{}
	}
	o.Tags = middleware.TagPolicy{Headers: []string{"Surrogate-Key"}}
	o.Purge = &middleware.PurgePolicy{Authorize: func(r *http.Request) bool { return r.Header.Get("X-Purge-Key") == "secret" }}
	b := newTestBed(t, s, page, &bedOptions{procs: 3, mw: o, quiet: true})
	b.get(t, "/p", procHeader, "0").check(t, 200, "MISS", "render 1")
	b.waitStored(t, "/p", "render 1")
	for i := range 3 {
		b.get(t, "/p", procHeader, fmt.Sprint(i)).check(t, 200, "HIT", "render 1")
	}
	return b
}

// staleThenRevalidated checks that, /p soft-purged, every process
// answers with the stale page at once while one conditional render in
// the cluster is held, and with the page freshened (a hit) after it.
func staleThenRevalidated(t *testing.T, ctx context.Context, b *testBed, page *etagPage) {
	t.Helper()
	for i := range 3 {
		r := b.get(t, "/p", procHeader, fmt.Sprint(i))
		r.check(t, 200, "STALE", "render 1")
		if cs := r.header.Get("Cache-Status"); cs != "stampede; hit; ttl=-1" {
			t.Errorf("process %d: Cache-Status %q, want a hit with a negative ttl: served stale", i, cs)
		}
		if i == 0 {
			redistest.Recv(t, ctx, page.started, "the conditional render")
		}
	}
	close(page.release)
	redistest.WaitFor(t, ctx, "the revalidated page", func() bool {
		r := b.get(t, "/p", procHeader, "1")
		if r.body != "render 1" {
			t.Fatalf("after the soft purge: %v, want the page of render 1, freshened by a 304", r)
		}
		return r.cache() == "HIT"
	})
	if n, c := page.renders.Load(), page.conditional.Load(); n != 2 || c != 1 {
		t.Errorf("%d renders, %d conditional; want 2 and 1: one revalidation in the cluster", n, c)
	}
}

// TestSoftPurgeURL_processes: after SoftPurgeURL in one process, every
// process answers at once with the stale page while exactly one
// conditional render (If-None-Match) in the cluster revalidates it; its
// 304 freshens the page.
func TestSoftPurgeURL_processes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 30*time.Second)
		page := newETagPage(ctx, swrPage, true)
		b := softBed(t, s, page, nil)
		if err := b.mws[2].SoftPurgeURL(ctx, b.srv.URL+"/p", nil); err != nil {
			t.Fatal(err)
		}
		staleThenRevalidated(t, ctx, b, page)
	})
}

// TestSoftPurgeTag_processes: as TestSoftPurgeURL_processes, by tag.
func TestSoftPurgeTag_processes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 30*time.Second)
		page := newETagPage(ctx, swrPage, true)
		b := softBed(t, s, page, nil)
		if err := b.mws[2].SoftPurgeTag(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		staleThenRevalidated(t, ctx, b, page)
	})
}

// TestSoftPurge_staleIfError: a soft-purged page whose revalidation
// fails goes on being served stale, not the failure.
func TestSoftPurge_staleIfError(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 30*time.Second)
		page := newETagPage(ctx, swrPage, false)
		b := softBed(t, s, page, nil)
		page.fail.Store(true)
		if err := b.mws[0].SoftPurgeURL(ctx, b.srv.URL+"/p", nil); err != nil {
			t.Fatal(err)
		}
		b.get(t, "/p", procHeader, "1").check(t, 200, "STALE", "render 1")
		redistest.Recv(t, ctx, page.started, "the failing revalidation")
		b.get(t, "/p", procHeader, "2").check(t, 200, "STALE", "render 1")
	})
}

// TestSoftPurge_mustRevalidate: a soft-purged page whose response says
// must-revalidate is not served stale: the requests of every process
// wait for the one revalidation and are answered with its result.
func TestSoftPurge_mustRevalidate(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, purge := range []string{"url", "tag"} {
			t.Run(purge, func(t *testing.T) {
				ctx := testContext(t, 30*time.Second)
				page := newETagPage(ctx, "max-age=3600, must-revalidate", true)
				b := softBed(t, s, page, nil)
				var err error
				if purge == "url" {
					err = b.mws[2].SoftPurgeURL(ctx, b.srv.URL+"/p", nil)
				} else {
					err = b.mws[2].SoftPurgeTag(ctx, "t")
				}
				if err != nil {
					t.Fatal(err)
				}
				first := b.goSend(ctx, http.MethodGet, "/p", procHeader, "0")
				redistest.Recv(t, ctx, page.started, "the revalidation")
				second := b.goSend(ctx, http.MethodGet, "/p", procHeader, "1")
				redistest.WaitFor(t, ctx, "the other process waiting", func() bool { return b.caches[1].Stats().Waits >= 1 })
				close(page.release)
				for i, ch := range []<-chan sent{first, second} {
					got := redistest.Recv(t, ctx, ch, "an answer")
					if got.err != nil {
						t.Fatal(got.err)
					}
					if got.body != "render 1" || got.cache() == "STALE" || got.status != 200 {
						t.Errorf("request %d: %v; want the revalidated page, never served stale", i, got.reply)
					}
				}
				if n, c := page.renders.Load(), page.conditional.Load(); n != 2 || c != 1 {
					t.Errorf("%d renders, %d conditional; want 2 and 1", n, c)
				}
			})
		}
	})
}

// TestSoftPurge_hardAfterSoft: a hard purge after a soft one wins: the
// soft-purged page is never served again, and the revalidation that was
// running is not stored.
func TestSoftPurge_hardAfterSoft(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, purge := range []string{"url", "tag"} {
			t.Run(purge, func(t *testing.T) {
				ctx := testContext(t, 30*time.Second)
				page := newETagPage(ctx, swrPage, true)
				b := softBed(t, s, page, nil)
				soft, hard := b.mws[0].SoftPurgeURL, b.mws[0].PurgeURL
				if purge == "tag" {
					soft = func(ctx context.Context, _ string, _ http.Header) error { return b.mws[0].SoftPurgeTag(ctx, "t") }
					hard = func(ctx context.Context, _ string, _ http.Header) error { return b.mws[0].PurgeTag(ctx, "t") }
				}
				if err := soft(ctx, b.srv.URL+"/p", nil); err != nil {
					t.Fatal(err)
				}
				b.get(t, "/p", procHeader, "1").check(t, 200, "STALE", "render 1")
				redistest.Recv(t, ctx, page.started, "the revalidation")
				if err := hard(ctx, b.srv.URL+"/p", nil); err != nil {
					t.Fatal(err)
				}
				b.get(t, "/p", procHeader, "2").check(t, 200, "MISS", "render 3")
				close(page.release)
				for i := range 3 {
					r := b.get(t, "/p", procHeader, fmt.Sprint(i))
					if r.body != "render 3" {
						t.Errorf("process %d after the hard purge: %v; want render 3", i, r)
					}
				}
			})
		}
	})
}

// TestSoftPurgeURL_vary: a page with Vary soft-purged by URL is purged
// hard: the next request renders it.
func TestSoftPurgeURL_vary(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 30*time.Second)
		var renders atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := renders.Add(1)
			w.Header().Set("Cache-Control", swrPage)
			w.Header().Set("Vary", "Accept-Language")
			fmt.Fprintf(w, "render %d", n)
		})
		b := newTestBed(t, s, h, &bedOptions{procs: 2})
		b.get(t, "/v", "Accept-Language", "en").check(t, 200, "MISS", "render 1")
		redistest.WaitFor(t, ctx, "the variant stored", func() bool {
			return b.get(t, "/v", "Accept-Language", "en", procHeader, "1").cache() == "HIT"
		})
		if err := b.mws[0].SoftPurgeURL(ctx, b.srv.URL+"/v", nil); err != nil {
			t.Fatal(err)
		}
		b.get(t, "/v", "Accept-Language", "en", procHeader, "1").check(t, 200, "MISS", "render 2")
	})
}

// TestPurge_softField: PURGE with Fastly-Soft-Purge: exactly one line
// "1" soft-purges, "0" purges, anything else is refused (400) and
// purges nothing; without authorisation, 403.
func TestPurge_softField(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, tc := range []struct {
		name   string
		hdr    []string
		status int
		detail string
		next   string // X-Cache of the next GET
	}{
		{"soft url", []string{"Fastly-Soft-Purge", "1"}, 200, "soft-purged-url", "STALE"},
		{"hard url", []string{"Fastly-Soft-Purge", "0"}, 200, "purged-url", "MISS"},
		{"soft tags", []string{"Fastly-Soft-Purge", "1", "Surrogate-Key", "t"}, 200, "soft-purged-tags", "STALE"},
		{"other value", []string{"Fastly-Soft-Purge", "true"}, 400, "purge-invalid", "HIT"},
		{"empty", []string{"Fastly-Soft-Purge", ""}, 400, "purge-invalid", "HIT"},
		{"two lines", []string{"Fastly-Soft-Purge", "1", "Fastly-Soft-Purge", "1"}, 400, "purge-invalid", "HIT"},
		{"unauthorised", []string{"Fastly-Soft-Purge", "1", "X-Purge-Key", "wrong"}, 403, "purge-forbidden", "HIT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t, 30*time.Second)
			page := newETagPage(ctx, swrPage, true)
			b := softBed(t, s, page, nil)
			hdr := tc.hdr
			if tc.status != 403 {
				hdr = append(hdr, "X-Purge-Key", "secret")
			}
			r := b.do(t, "PURGE", "/p", hdr...)
			if r.status != tc.status || r.cache() != "PURGE; detail="+tc.detail {
				t.Errorf("PURGE: %v; want %d with detail=%s", r, tc.status, tc.detail)
			}
			if got := b.get(t, "/p", procHeader, "1"); got.cache() != tc.next {
				t.Errorf("GET after the PURGE: %v; want %s", got, tc.next)
			}
		})
	}
}

// TestSoftPurgeTag_duringRender: a soft purge while a page of the tag
// renders (which may have read the data from before it) wins: its client
// gets the render, and the page is stored stale at once, so the next
// request in any process is answered with it stale while one more render
// refreshes it.
func TestSoftPurgeTag_duringRender(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 30*time.Second)
		gate := newRenderGate(ctx, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := gate.next()
			w.Header().Set("Surrogate-Key", "t")
			w.Header().Set("Cache-Control", swrPage)
			fmt.Fprintf(w, "render %d", n)
		})
		b := newTestBed(t, s, h, &bedOptions{procs: 2, mw: tagOptions(), quiet: true})
		first := b.goSend(ctx, http.MethodGet, "/p", procHeader, "0")
		redistest.Recv(t, ctx, gate.started, "the first render")
		if err := b.mws[1].SoftPurgeTag(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		gate.open()
		got := redistest.Recv(t, ctx, first, "the first client's answer")
		if got.err != nil {
			t.Fatal(got.err)
		}
		got.check(t, 200, "MISS", "render 1")
		b.waitStored(t, "/p", "render 1")
		b.get(t, "/p", procHeader, "1").check(t, 200, "STALE", "render 1")
		redistest.WaitFor(t, ctx, "the refreshed page", func() bool {
			return b.get(t, "/p", procHeader, "0").body == "render 2"
		})
		b.get(t, "/p", procHeader, "1").check(t, 200, "HIT", "render 2")
		if n := gate.renders.Load(); n != 2 {
			t.Errorf("%d renders, want 2: the one the soft purge overtook and one refresh", n)
		}
	})
}

// TestSoftPurgeTag_sharedRender: a request that joins, after a soft purge
// of its tag, a render that began before it is answered with that render
// as stale, not as a hit: the render may have read the data from before
// the purge (the robustness suite's soft-purge check found it served as
// a hit).
func TestSoftPurgeTag_sharedRender(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 30*time.Second)
		gate := newRenderGate(ctx, 1)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := gate.next()
			w.Header().Set("Surrogate-Key", "t")
			w.Header().Set("Cache-Control", swrPage)
			fmt.Fprintf(w, "render %d", n)
		})
		b := newTestBed(t, s, h, &bedOptions{procs: 1, mw: tagOptions(), quiet: true})
		first := b.goSend(ctx, http.MethodGet, "/p")
		redistest.Recv(t, ctx, gate.started, "the first render")
		if err := b.mws[0].SoftPurgeTag(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		joined := b.goSend(ctx, http.MethodGet, "/p")
		// Each request reports its miss before it joins the flight.
		redistest.WaitFor(t, ctx, "the second request waiting", func() bool { return b.caches[0].Stats().Misses >= 2 })
		gate.open()
		got := redistest.Recv(t, ctx, first, "the first client's answer")
		if got.err != nil {
			t.Fatal(got.err)
		}
		got.check(t, 200, "MISS", "render 1")
		got = redistest.Recv(t, ctx, joined, "the joined request's answer")
		if got.err != nil {
			t.Fatal(got.err)
		}
		got.check(t, 200, "STALE", "render 1")
	})
}

// TestSoftPurgeURL_duringRevalidation: a soft purge while a page kept
// past its freshness is revalidated (its grace keeps it: it may not be
// served stale, so requests wait for the one revalidation) wins over that
// revalidation, which began before it and may have read the data from
// before: its client gets it, but it is not stored, and the next request
// in any process waits for one more render. (The robustness suite found
// the revalidation stored as fresh: its write was conditional on the
// entry read after the render, which the soft purge had rewritten with
// the same version.)
func TestSoftPurgeURL_duringRevalidation(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 30*time.Second)
		gate := newRenderGate(ctx, 2)
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := gate.next()
			w.Header().Set("Cache-Control", "max-age=1, stale-if-error=60")
			fmt.Fprintf(w, "render %d", n)
		})
		b := newTestBed(t, s, h, &bedOptions{procs: 2, quiet: true})
		b.get(t, "/p", procHeader, "0").check(t, 200, "MISS", "render 1")
		b.waitStored(t, "/p", "render 1")
		b.clock.Advance(2 * time.Second) // past its freshness, within its grace: kept
		first := b.goSend(ctx, http.MethodGet, "/p", procHeader, "0")
		redistest.Recv(t, ctx, gate.started, "the revalidation")
		if err := b.mws[1].SoftPurgeURL(ctx, b.srv.URL+"/p", nil); err != nil {
			t.Fatal(err)
		}
		gate.open()
		got := redistest.Recv(t, ctx, first, "the first client's answer")
		if got.err != nil {
			t.Fatal(got.err)
		}
		if got.status != 200 || got.body != "render 2" {
			t.Errorf("the revalidating request: %v; want render 2", got.reply)
		}
		for i := range 2 {
			r := b.get(t, "/p", procHeader, fmt.Sprint(i))
			if r.status != 200 || r.body != "render 3" || r.cache() == "STALE" {
				t.Errorf("process %d after the soft purge: %v; want render 3, the revalidation after it", i, r)
			}
		}
		if n := gate.renders.Load(); n != 3 {
			t.Errorf("%d renders, want 3: the first, the revalidation the soft purge overtook, one after it", n)
		}
	})
}
