package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

// This file tests what a render may leave in the cache: only a complete
// response (its body as long as it says), rendered for a GET, with a
// status that is a whole response.

// TestMiddleware_incompleteBody: a handler that declares a Content-Length
// and writes another number of bytes (http.ServeContent when a read fails
// half way) made an incomplete response (RFC 9111 3.4): it is not stored,
// and its own client is not told it is complete (net/http ends the
// connection short of the declared length). Before, the short body was
// stored with Content-Length rewritten to its length and served as a
// complete 200, to the first client and every later one.
func TestMiddleware_incompleteBody(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range []struct {
		name     string
		declared string
		written  int // bytes written; below 0, the declared length and then the rest
	}{
		{"short", "1000", 300},
		{"empty", "1000", 0},
		// net/http refuses a Write past the declared length whole, and
		// ends the connection short of it. (Without the middleware, a
		// handler that writes the declared length first has its client
		// given that much as complete; the middleware passes the body on
		// in one Write, so its client is told it is not.)
		{"long", "10", 300},
		{"long in two writes", "10", -300},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				renders.Add(1)
				w.Header().Set("Cache-Control", "public, max-age=60")
				w.Header().Set("Content-Length", tt.declared)
				if tt.written < 0 {
					_, _ = io.WriteString(w, strings.Repeat("x", 10))
					_, _ = io.WriteString(w, strings.Repeat("x", -tt.written-10))
					return
				}
				_, _ = io.WriteString(w, strings.Repeat("x", tt.written))
			}), &bedOptions{quiet: true})
			ctx := testContext(t, 20*time.Second)
			for i := range 2 {
				// Every client's read fails short of the declared length.
				if r, err := b.send(ctx, http.MethodGet, "/t"); !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("request %d: got %v, err %v; want the body cut short of %s bytes", i, r, err, tt.declared)
				}
				b.waitGone(t, "/t")
			}
			if n := renders.Load(); n != 2 {
				t.Errorf("renders = %d, want 2: an incomplete response is not stored", n)
			}
		})
	}
}

// TestMiddleware_headRoute: with the middleware mounted on routes (chi's
// r.With(m.Handler).Head, a net/http "HEAD /x" pattern, a router of one's
// own that dispatches by method first, or chi's r.Use in a sub-router,
// which routes the request's render by the method it was routed by), a
// HEAD request's render is made by the HEAD route's handler, which
// writes no body (or answers 405): it is not stored, so a GET is never
// answered with it. A HEAD is still answered from a GET's entry. Before,
// the HEAD's empty answer (or its 405) was stored under GET's key and
// the next GET got it as a HIT.
func TestMiddleware_headRoute(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	get := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renders.Add(1)
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "the page")
	})
	head := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renders.Add(1)
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Content-Type", "text/plain")
	})
	for _, tt := range []struct {
		name     string
		path     string
		router   func(m *middleware.Middleware, c *cache.Cache) http.Handler
		headCode int   // what the HEAD route answers
		renders  int32 // by the test's handlers (chi answers 405 itself)
	}{
		{"chi r.With per route", "/x", func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
			r := chi.NewRouter()
			r.With(m.Handler).Get("/x", get)
			r.With(m.Handler).Head("/x", head)
			return r
		}, 200, 2},
		{"ServeMux HEAD pattern", "/x", func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("GET /x", m.Handler(get))
			mux.Handle("HEAD /x", m.Handler(head))
			return mux
		}, 200, 2},
		{"a router of one's own", "/x", func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
			g, h := m.Handler(get), m.Handler(head)
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodHead {
					h.ServeHTTP(w, r)
					return
				}
				g.ServeHTTP(w, r)
			})
		}, 200, 2},
		{"chi sub-router r.Use", "/s/x", func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
			r := chi.NewRouter()
			r.Route("/s", func(sr chi.Router) {
				sr.Use(m.Handler)
				sr.Get("/x", get)
			})
			return r
		}, 405, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			renders.Store(0)
			b := newTestBed(t, s, nil, &bedOptions{router: tt.router})
			r := b.do(t, http.MethodHead, tt.path)
			if r.status != tt.headCode || r.cache() == "HIT" {
				t.Errorf("first HEAD: %v, want %d from the handler", r, tt.headCode)
			}
			b.waitGone(t, tt.path)
			r, joined := b.getAfterUnstored(t, tt.path)
			r.check(t, 200, "MISS", "the page")
			b.waitStored(t, tt.path, "the page")
			b.get(t, tt.path).check(t, 200, "HIT", "the page")
			b.do(t, http.MethodHead, tt.path).check(t, 200, "HIT", "")
			if n := renders.Load(); n != tt.renders+int32(joined) {
				t.Errorf("renders = %d, want %d (the HEAD route's, if any, and the GET's)", n, tt.renders)
			}
		})
	}
}

// TestMiddleware_partialNeverStored: a 206 is a part of a response, and
// is never stored, whatever Statuses or ShouldCache say. Before, a 206
// listed in Statuses, or accepted by ShouldCache, was stored and served to
// every later request, with or without Range.
func TestMiddleware_partialNeverStored(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range []struct {
		name string
		o    *middleware.Options
	}{
		{"Statuses", &middleware.Options{Statuses: []int{200, 206}}},
		{"ShouldCache", &middleware.Options{ShouldCache: func(int, http.Header) bool { return true }}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				renders.Add(1)
				w.Header().Set("Cache-Control", "max-age=60")
				w.Header().Set("Content-Range", "bytes 0-3/10")
				w.WriteHeader(http.StatusPartialContent)
				_, _ = io.WriteString(w, "part")
			}), &bedOptions{mw: tt.o})
			b.get(t, "/p").check(t, 206, "BYPASS", "part")
			b.waitGone(t, "/p")
			b.get(t, "/p").check(t, 206, "BYPASS", "part")
			if n := renders.Load(); n != 2 {
				t.Errorf("renders = %d, want 2", n)
			}
		})
	}
}

// TestChi_renderedAgain: a render run a second time (a 304 that names
// another representation, see TestMiddleware_revalidateOtherRepresentation)
// behind chi's r.Use routes as the first did: the handler sees its route
// pattern and URL parameters once, not the route appended twice.
func TestChi_renderedAgain(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	seen := make(chan string, 3)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		seen <- r.Pattern + " id=" + chi.URLParam(r, "id")
		w.Header().Set("Cache-Control", "max-age=10")
		if r.Header.Get("If-None-Match") != "" {
			w.Header().Set("Etag", `"v2"`)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Etag", `"v`+strconv.Itoa(int(min(n, 2)))+`"`)
		fmt.Fprintf(w, "body-%d", n)
	})
	b := newTestBed(t, s, nil, &bedOptions{router: func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
		r := chi.NewRouter()
		r.Use(m.Handler)
		r.Get("/o/{id}", h)
		return r
	}})
	b.get(t, "/o/7").check(t, 200, "MISS", "body-1")
	b.waitStored(t, "/o/7", "body-1")
	b.clock.Advance(11 * time.Second)
	b.get(t, "/o/7").check(t, 200, "MISS", "body-3")
	close(seen)
	for route := range seen {
		if route != "/o/{id} id=7" {
			t.Errorf("a render saw %q, want /o/{id} id=7", route)
		}
	}
}

// TestMiddleware_chiRoutePatternOnMiss: since d31cf5c the render a
// request did itself (a MISS) ran on the load's context, whose chi
// routing context is a copy taken before routing. With the middleware in
// a chi router's r.Use, chi then routed on that copy, and the request's
// own routing context, which outer middlewares read after next returns
// (the usual way to label metrics and logs by route pattern), was left
// without the route: every MISS was labelled "". The render in the
// request's goroutine uses the request's own context values again.
func TestMiddleware_chiRoutePatternOnMiss(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	patterns := make(chan string, 4)
	metrics := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r)
			patterns <- chi.RouteContext(r.Context()).RoutePattern()
		})
	}
	b := newTestBed(t, s, nil, &bedOptions{router: func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
		r := chi.NewRouter()
		r.Use(metrics, m.Handler)
		r.Get("/items/{id}", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "item %s", chi.URLParam(r, "id"))
		})
		return r
	}})
	b.get(t, "/items/1").check(t, 200, "MISS", "item 1")
	if p := <-patterns; p != "/items/{id}" {
		t.Errorf("an outer middleware saw route pattern %q for a MISS, want /items/{id}", p)
	}
	b.get(t, "/items/1").check(t, 200, "HIT", "item 1")
	<-patterns // a HIT is not routed past the middleware: nothing to check
}

// TestMiddleware_renderKeepsRequestDeadline: the render a request did for
// the cache ran on context.WithoutCancel of the load's context, so it
// carried no deadline at all, and an application's own request deadline
// (chi's middleware.Timeout, http.TimeoutHandler, a WithTimeout set by an
// outer middleware) no longer bounded it: its end counted as "the client
// went" and the render ran on to LoadTimeout. Here the application gives
// each request 200ms; the render was cut only by LoadTimeout (3s), and
// the handler, which budgets its work by ctx.Deadline, saw none. Only a
// client that goes away (a cancellation before the deadline) is ignored
// now; the render has the request's deadline and ends at it, and what it
// wrote is not stored.
func TestMiddleware_renderKeepsRequestDeadline(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	type seen struct {
		deadline bool
		took     time.Duration
	}
	out := make(chan seen, 2)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		start := time.Now()
		_, ok := r.Context().Deadline()
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		out <- seen{ok, time.Since(start)}
		fmt.Fprintf(w, "done %d", n)
	}), &bedOptions{
		cache: &cache.Options{LoadTimeout: 3 * time.Second},
		wrap: func(h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				ctx, cancel := context.WithTimeout(r.Context(), 200*time.Millisecond)
				defer cancel()
				h.ServeHTTP(w, r.WithContext(ctx))
			})
		},
	})
	_ = b.get(t, "/slow")
	got := <-out
	if !got.deadline {
		t.Errorf("the handler rendering for the cache sees no deadline on its context")
	}
	if got.took > time.Second {
		t.Errorf("the render ran %v although the application's deadline for the request was 200ms", got.took)
	}
	// Cut by its deadline, the render was no answer for anyone else.
	if r := b.get(t, "/slow"); r.cache() == "HIT" {
		t.Errorf("the render cut by the request's deadline was stored: %v", r)
	}
}

func TestMiddleware_head(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	methods := make(chan string, 10)
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		methods <- r.Method
		w.Header().Set("X-Custom", "c")
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "head-body-%d", renders.Add(1))
	}), nil)
	same := func(t *testing.T, head, get reply) {
		t.Helper()
		for _, name := range []string{"Content-Length", "Content-Type", "Etag", "X-Custom"} {
			if head.header.Get(name) != get.header.Get(name) || get.header.Get(name) == "" {
				t.Errorf("%s: HEAD %q, GET %q", name, head.header.Get(name), get.header.Get(name))
			}
		}
	}

	t.Run("answered from the GET's entry", func(t *testing.T) {
		get := b.get(t, "/h1")
		get.check(t, 200, "MISS", "head-body-1")
		head := b.do(t, http.MethodHead, "/h1")
		head.check(t, 200, "HIT", "")
		same(t, head, get)
		if got := head.header.Get("Content-Length"); got != "11" {
			t.Errorf("Content-Length = %s, want 11", got)
		}
	})
	t.Run("a miss stores the full response", func(t *testing.T) {
		head := b.do(t, http.MethodHead, "/h2")
		head.check(t, 200, "MISS", "")
		get := b.get(t, "/h2")
		get.check(t, 200, "HIT", "head-body-2")
		same(t, head, get)
	})
	close(methods)
	for m := range methods {
		if m != http.MethodGet {
			t.Errorf("the handler rendered a %s; renders for the cache are GETs", m)
		}
	}
	if n := renders.Load(); n != 2 {
		t.Errorf("renders = %d, want 2", n)
	}
}
