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
