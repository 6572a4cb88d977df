package middleware_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

func TestChi(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	show := func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s id=%s n=%d", middleware.RoutePattern(r), chi.URLParam(r, "id"), renders.Add(1))
	}
	b := newTestBed(t, s, nil, &bedOptions{router: func(_ *middleware.Middleware, c *cache.Cache) http.Handler {
		r := chi.NewRouter()
		r.Group(func(r chi.Router) {
			r.Use(middleware.Cache(c, time.Minute))
			r.Get("/items/{id}", show)
		})
		r.With(middleware.Cache(c, time.Minute)).Get("/with/{id}", show)
		r.Get("/plain/{id}", show)
		return r
	}})

	b.get(t, "/items/1").check(t, 200, "MISS", "/items/{id} id=1 n=1")
	b.get(t, "/items/1").check(t, 200, "HIT", "/items/{id} id=1 n=1")
	b.get(t, "/items/2").check(t, 200, "MISS", "/items/{id} id=2 n=2")
	b.get(t, "/with/7").check(t, 200, "MISS", "/with/{id} id=7 n=3")
	b.get(t, "/with/7").check(t, 200, "HIT", "/with/{id} id=7 n=3")
	b.get(t, "/plain/9").check(t, 200, "", "/plain/{id} id=9 n=4")
	b.get(t, "/plain/9").check(t, 200, "", "/plain/{id} id=9 n=5")
	if b.stored(t, "/plain/9") {
		t.Error("a route without the middleware was stored")
	}
}

func TestRoutePattern_withoutChi(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- middleware.RoutePattern(r)
	}))
	defer srv.Close()
	res, err := srv.Client().Get(srv.URL + "/x")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if p := <-got; p != "" {
		t.Errorf("RoutePattern = %q without chi", p)
	}
	if p := middleware.RoutePattern(httptest.NewRequest("GET", "/x", nil)); p != "" {
		t.Errorf("RoutePattern = %q without chi", p)
	}
}

// TestChi_backgroundRender: a stale refresh renders after the request
// that triggered it has ended, when chi has reset that request's routing
// context and put it back in its pool for other requests; the refresh
// must still route and render its own URL. An outer middleware does to the
// ended request's routing context what chi's next user of it would do,
// while the refresh is held between routing and rendering.
func TestChi_backgroundRender(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	var renders, gets atomic.Int32
	started, reused, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	show := func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		if n == 2 {
			close(started)
			block(ctx, release)
		}
		w.Header().Set("Cache-Control", "max-age=10, stale-while-revalidate=60")
		fmt.Fprintf(w, "%s id=%s n=%d", middleware.RoutePattern(r), chi.URLParam(r, "id"), n)
	}
	reuse := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			next.ServeHTTP(w, r)
			if r.Method == http.MethodGet && gets.Add(1) == 2 {
				// The stale request is done; its refresh has routed.
				block(ctx, started)
				rctx := chi.RouteContext(r.Context())
				rctx.Reset()
				rctx.URLParams.Add("id", "reused")
				close(reused)
			}
		})
	}
	b := newTestBed(t, s, nil, &bedOptions{router: func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
		r := chi.NewRouter()
		r.Use(reuse, m.Handler)
		r.Get("/items/{id}", show)
		r.Post("/items/{id}", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "posted %s", chi.URLParam(r, "id"))
		})
		return r
	}})

	b.get(t, "/items/1").check(t, 200, "MISS", "/items/{id} id=1 n=1")
	b.waitStored(t, "/items/1", "n=1")
	b.clock.Advance(11 * time.Second)
	stale := b.goSend(ctx, "GET", "/items/1")
	redistest.Recv(t, ctx, reused, "the stale request to end")
	if r := redistest.Recv(t, ctx, stale, "the stale reply"); r.err != nil {
		t.Fatal(r.err)
	} else {
		r.check(t, 200, "STALE", "/items/{id} id=1 n=1")
	}
	// More requests through the router, with routing contexts from
	// chi's pool.
	for i := range 10 {
		b.do(t, "POST", "/items/99"+strconv.Itoa(i)).check(t, 200, "BYPASS", "posted 99"+strconv.Itoa(i))
	}
	close(release)
	b.waitStored(t, "/items/1", "n=2")
	b.get(t, "/items/1").check(t, 200, "HIT", "/items/{id} id=1 n=2")
}

// TestChi_purge: PURGE with the middleware where docs/http.md puts it. In
// a chi group (r.Group + r.Use) chi routes before the group's middlewares
// run, so a PURGE needs a route: r.Method("PURGE", "/*", m.PurgeHandler())
// answers it as Options.Purge does (issue 39: without it chi answered 405
// and the page stayed a HIT). The middleware in the root router's r.Use,
// before the routes, sees every PURGE itself. PurgeHandler answers other
// methods 405 and, without Options.Purge, PURGE 501. (chi must know the
// method: chi.RegisterMethod.)
func TestChi_purge(t *testing.T) {
	chi.RegisterMethod("PURGE") // as docs/http.md says: chi routes only the methods it knows
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	show := func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s n=%d", r.URL.Path, renders.Add(1))
	}
	allow := &middleware.PurgePolicy{Authorize: func(r *http.Request) bool { return r.Header.Get("X-Purge-Key") == "secret" }}
	layouts := map[string]func(m *middleware.Middleware) http.Handler{
		"group with PurgeHandler": func(m *middleware.Middleware) http.Handler {
			r := chi.NewRouter()
			r.Group(func(r chi.Router) {
				r.Use(m.Handler)
				r.Get("/items/{id}", show)
			})
			r.Method("PURGE", "/*", m.PurgeHandler())
			return r
		},
		"PurgeHandler in the group": func(m *middleware.Middleware) http.Handler {
			r := chi.NewRouter()
			r.Group(func(r chi.Router) {
				r.Use(m.Handler)
				r.Get("/items/{id}", show)
				r.Method("PURGE", "/*", m.PurgeHandler())
			})
			return r
		},
		"root r.Use": func(m *middleware.Middleware) http.Handler {
			r := chi.NewRouter()
			r.Use(m.Handler)
			r.Get("/items/{id}", show)
			return r
		},
	}
	for name, layout := range layouts {
		t.Run(name, func(t *testing.T) {
			b := newTestBed(t, s, nil, &bedOptions{
				mw:     &middleware.Options{Purge: allow},
				router: func(m *middleware.Middleware, _ *cache.Cache) http.Handler { return layout(m) },
			})
			first := b.get(t, "/items/1")
			b.get(t, "/items/1").check(t, 200, "HIT", first.body)
			r := b.do(t, "PURGE", "/items/1", "X-Purge-Key", "guess")
			if r.status != http.StatusForbidden || r.cache() != "PURGE; detail=purge-forbidden" {
				t.Errorf("unauthorised PURGE: %v", r)
			}
			b.get(t, "/items/1").check(t, 200, "HIT", first.body)
			r = b.do(t, "PURGE", "/items/1", "X-Purge-Key", "secret")
			if r.status != http.StatusOK || r.cache() != "PURGE; detail=purged-url" || r.header["Cache-Status"] != nil {
				t.Errorf("PURGE: %v, Cache-Status %q", r, r.header["Cache-Status"])
			}
			if r := b.get(t, "/items/1"); r.cache() != "MISS" || r.body == first.body {
				t.Errorf("after the PURGE: %v; want a new render", r)
			}
		})
	}

	t.Run("PurgeHandler alone", func(t *testing.T) {
		c, err := cache.New(s.Client(t), &cache.Options{Namespace: "mw" + redistest.Key(t, "")})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, tc := range []struct {
			purge          *middleware.PurgePolicy
			method, key    string
			status         int
			xcache, allowH string
		}{
			{allow, http.MethodGet, "secret", http.StatusMethodNotAllowed, "", "PURGE"},
			{allow, "PURGE", "secret", http.StatusOK, "PURGE; detail=purged-url", ""},
			{allow, "PURGE", "", http.StatusForbidden, "PURGE; detail=purge-forbidden", ""},
			{nil, "PURGE", "secret", http.StatusNotImplemented, "PURGE; detail=purge-disabled", ""},
		} {
			m, err := middleware.New(c, &middleware.Options{Purge: tc.purge})
			if err != nil {
				t.Fatal(err)
			}
			w := httptest.NewRecorder()
			req := httptest.NewRequest(tc.method, "/x", nil)
			req.Header.Set("X-Purge-Key", tc.key)
			m.PurgeHandler().ServeHTTP(w, req)
			if w.Code != tc.status || w.Header().Get("X-Cache") != tc.xcache || w.Header().Get("Allow") != tc.allowH || w.Header()["Cache-Status"] != nil {
				t.Errorf("%s (policy %v): %d X-Cache %q Allow %q Cache-Status %q; want %d, %q, %q, none", tc.method, tc.purge != nil,
					w.Code, w.Header().Get("X-Cache"), w.Header().Get("Allow"), w.Header()["Cache-Status"], tc.status, tc.xcache, tc.allowH)
			}
		}
	})
}
