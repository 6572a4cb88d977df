package middleware_test

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

// observeHandler answers /cookie with a cookie, /err with a 500 and
// everything else with its path.
var observeHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/cookie":
		http.SetCookie(w, &http.Cookie{Name: "s", Value: "1"})
	case "/err":
		w.WriteHeader(http.StatusInternalServerError)
	}
	fmt.Fprint(w, r.URL.Path)
})

// Every request answered is one Event, with the reason a BYPASS is
// given; cache.Stats counts the HITs as hits and what went to GetOrLoad
// as misses, once per request.
func TestMiddleware_Observer_events(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	events := make(chan middleware.Event, 16)
	b := newTestBed(t, s, observeHandler, &bedOptions{mw: &middleware.Options{
		Observer: func(e middleware.Event) { events <- e },
	}})
	steps := []struct {
		name, method, path string
		hdr                []string
		xcache             string
		kind               middleware.EventKind
		reason             string
		status             int
	}{
		{"miss", "GET", "/a", nil, "MISS", middleware.EventMiss, "", 200},
		{"hit", "GET", "/a", nil, "HIT", middleware.EventHit, "", 200},
		{"conditional hit", "GET", "/a", []string{"If-None-Match", "*"}, "HIT", middleware.EventHit, "", 304},
		{"method", "POST", "/a", nil, "BYPASS", middleware.EventBypass, "method", 200},
		{"authorization", "GET", "/a", []string{"Authorization", "Bearer x"}, "BYPASS", middleware.EventBypass, "authorization", 200},
		{"cookie set", "GET", "/cookie", nil, "BYPASS", middleware.EventBypass, "sets a cookie", 200},
		{"server error", "GET", "/err", nil, "BYPASS", middleware.EventBypass, "server error", 500},
		{"unknown method", "FOO", "/b", nil, "BYPASS", middleware.EventBypass, "method", 200},
	}
	for _, st := range steps {
		r := b.do(t, st.method, st.path, st.hdr...)
		if r.cache() != st.xcache || r.status != st.status {
			t.Errorf("%s: status %d, X-Cache %q; want %d, %q", st.name, r.status, r.cache(), st.status, st.xcache)
		}
		// The event comes after the response: wait for it.
		e := redistest.Recv(t, ctx, events, st.name+" event")
		// No router names the route: never the path.
		if e.Kind != st.kind || e.Route != "unknown" || e.Reason != st.reason || e.Err != nil || e.Duration <= 0 {
			t.Errorf("%s: event %+v (%s); want %s for route unknown with reason %q", st.name, e, e.Kind, st.kind, st.reason)
		}
		// The method as sent, the status as answered, the request's
		// own context (the server's value is in it).
		if e.Method != st.method || e.Status != st.status || e.Context == nil || e.Context.Value(http.ServerContextKey) == nil {
			t.Errorf("%s: event method %q, status %d, context %v; want %q, %d, the request's", st.name, e.Method, e.Status, e.Context, st.method, st.status)
		}
		if st.name == "miss" {
			b.waitStored(t, "/a", "/a") // the client is answered before the store
		}
	}
	select {
	case e := <-events:
		t.Errorf("extra event %+v", e)
	default:
	}
	// Two HITs (one answered 304); the MISS and the two renders that were
	// not stored went through GetOrLoad, a miss each; the first look with
	// Get counted only for the HITs.
	if st := b.stats(); st.Hits != 2 || st.StaleHits != 0 || st.Misses != 3 {
		t.Errorf("stats %+v; want 2 hits and 3 misses", st)
	}
}

// Event.Status is the status the client was sent, however the handler
// sent it: after a 1xx, by flushing, by copying (io.ReaderFrom), by
// writing nothing; 0 for a hijacked connection.
func TestMiddleware_Observer_status(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	events := make(chan middleware.Event, 16)
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hints":
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusNotFound)
		case "/flush": // a stream: passed through at the flush
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "x")
			if err := http.NewResponseController(w).Flush(); err != nil {
				panic(err)
			}
		case "/copy":
			w.WriteHeader(http.StatusCreated)
			_, _ = io.Copy(w, strings.NewReader("copied"))
		case "/hijack":
			conn, rw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				http.Error(w, err.Error(), http.StatusTeapot)
				return
			}
			defer conn.Close()
			fmt.Fprint(rw, "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\nh")
			_ = rw.Flush()
		}
		// /nothing writes nothing: net/http sends 200
	}), &bedOptions{mw: &middleware.Options{Observer: func(e middleware.Event) { events <- e }}})
	tests := []struct {
		name, method, path string
		status             int // the client's and the Event's
		body               string
		eventStatus        int
	}{
		{"1xx then 404", "GET", "/hints", 404, "", 404},
		{"flushed", "GET", "/flush", 200, "x", 200},
		{"copied", "POST", "/copy", 201, "copied", 201},
		{"nothing written", "POST", "/nothing", 200, "", 200},
		{"hijacked", "POST", "/hijack", 200, "h", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := b.do(t, tt.method, tt.path)
			if r.status != tt.status || r.body != tt.body {
				t.Errorf("response %d %q, want %d %q", r.status, r.body, tt.status, tt.body)
			}
			if e := redistest.Recv(t, ctx, events, "the event"); e.Status != tt.eventStatus {
				t.Errorf("%s event with status %d, want %d", e.Kind, e.Status, tt.eventStatus)
			}
		})
	}
}

func TestEventKind_String(t *testing.T) {
	tests := []struct {
		kind middleware.EventKind
		want string
	}{
		{middleware.EventHit, "hit"}, {middleware.EventStale, "stale"}, {middleware.EventMiss, "miss"},
		{middleware.EventBypass, "bypass"}, {middleware.EventCanceled, "canceled"}, {middleware.EventBackground, "background"},
		{0, "unknown"}, {200, "unknown"},
	}
	for _, tt := range tests {
		if got := tt.kind.String(); got != tt.want {
			t.Errorf("EventKind(%d).String() = %q, want %q", tt.kind, got, tt.want)
		}
	}
}

// syncBuffer is a bytes.Buffer for a slog handler written from handlers'
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A panicking Observer breaks no response: the panic is recovered and
// logged; the Logger also gets the reason of a BYPASS.
func TestMiddleware_Observer_panicIsRecovered(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	var logs syncBuffer
	b := newTestBed(t, s, observeHandler, &bedOptions{mw: &middleware.Options{
		Observer: func(middleware.Event) { panic("observer bug") },
		Logger:   slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}})
	b.get(t, "/a").check(t, http.StatusOK, "MISS", "/a")
	b.waitStored(t, "/a", "/a")
	b.get(t, "/a").check(t, http.StatusOK, "HIT", "/a")
	b.get(t, "/cookie").check(t, http.StatusOK, "BYPASS", "/cookie")
	redistest.WaitFor(t, ctx, "three logged panics and the bypass", func() bool {
		l := logs.String()
		return strings.Count(l, "Observer panicked") == 3 && strings.Contains(l, `reason="sets a cookie"`)
	})
}

// Route is the route pattern, never a path: chi's where the middleware
// runs after chi matched the route (r.With) or before (r.Use: the pattern
// chi will route the request to); net/http's ServeMux pattern without its
// method where the mux routed to the middleware (r.Pattern); a fixed
// label where no router names the route. A path may hold a secret (a
// reset token) and has no bound: with ServeMux it was the label.
func TestMiddleware_Observer_route(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	tests := []struct {
		name   string
		router func(m *middleware.Middleware, c *cache.Cache) http.Handler
		path   string
		want   string
	}{
		{"With", func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
			r := chi.NewRouter()
			r.With(m.Handler).Get("/users/{id}", observeHandler)
			return r
		}, "/users/7", "/users/{id}"},
		{"Use", func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
			r := chi.NewRouter()
			r.Use(m.Handler)
			r.Get("/users/{id}", observeHandler)
			return r
		}, "/users/7", "/users/{id}"},
		{"Use, in a mounted router", func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
			r := chi.NewRouter()
			r.Route("/api", func(r chi.Router) {
				r.Use(m.Handler)
				r.Get("/users/{id}", observeHandler)
			})
			return r
		}, "/api/users/7", "/api/users/{id}"},
		{"Use, no route", func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
			r := chi.NewRouter()
			r.Use(m.Handler)
			r.Get("/users/{id}", observeHandler)
			r.NotFound(observeHandler)
			return r
		}, "/reset/secret-token-056", "unknown"},
		{"ServeMux", func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("GET /reset/{token}", m.Handler(observeHandler))
			return mux
		}, "/reset/secret-token-056", "/reset/{token}"},
		{"around a ServeMux", func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
			mux := http.NewServeMux()
			mux.Handle("GET /reset/{token}", observeHandler)
			return m.Handler(mux)
		}, "/reset/secret-token-056", "unknown"},
		{"no router", func(m *middleware.Middleware, _ *cache.Cache) http.Handler {
			return m.Handler(observeHandler)
		}, "/reset/secret-token-056", "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			events := make(chan middleware.Event, 4)
			b := newTestBed(t, s, nil, &bedOptions{
				mw:     &middleware.Options{Observer: func(e middleware.Event) { events <- e }},
				router: tt.router,
			})
			b.get(t, tt.path).check(t, http.StatusOK, "MISS", tt.path)
			if e := redistest.Recv(t, ctx, events, "the event"); e.Kind != middleware.EventMiss || e.Route != tt.want {
				t.Errorf("event %+v; want a miss for route %q", e, tt.want)
			}
		})
	}
}

// A stale hit is an EventStale for the request and an EventBackground for
// the refresh it starts; cache.Stats counts one stale hit.
func TestMiddleware_Observer_staleRefresh(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	events := make(chan middleware.Event, 4)
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=10, stale-while-revalidate=30")
		fmt.Fprint(w, "v")
	}), &bedOptions{mw: &middleware.Options{Observer: func(e middleware.Event) { events <- e }}})

	b.get(t, "/swr").check(t, http.StatusOK, "MISS", "v")
	if e := redistest.Recv(t, ctx, events, "the miss"); e.Kind != middleware.EventMiss {
		t.Errorf("event %+v; want a miss", e)
	}
	b.waitStored(t, "/swr", "v")
	b.clock.Advance(11 * time.Second)
	b.get(t, "/swr").check(t, http.StatusOK, "STALE", "v")
	got := map[middleware.EventKind]middleware.Event{}
	for range 2 { // in either order
		e := redistest.Recv(t, ctx, events, "the stale hit and the refresh")
		got[e.Kind] = e
	}
	for _, kind := range []middleware.EventKind{middleware.EventStale, middleware.EventBackground} {
		if e, ok := got[kind]; !ok || e.Route != "unknown" || e.Reason != "" || e.Err != nil || e.Method != "GET" || e.Status != http.StatusOK || e.Context == nil {
			t.Errorf("%s event %+v (present %v); want one for route unknown, stored, of a GET answered 200, with a context", kind, e, ok)
		}
	}
	// The refresh's render can reach the stale request (and its answer
	// the client) before GetOrLoad, which counts the stale hit, returns.
	redistest.WaitFor(t, ctx, "the stale hit counted", func() bool { return b.stats().StaleHits >= 1 })
	if st := b.stats(); st.Hits != 0 || st.StaleHits != 1 || st.Misses != 1 || st.Refreshes != 1 {
		t.Errorf("stats %+v; want 1 miss, 1 stale hit, 1 refresh", st)
	}
}
