package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

var errBoom = errors.New("handler exploded")

// panicsTo returns a wrapper that reports the panics passing through it to
// ch and panics on, so that net/http sees them.
func panicsTo(ch chan<- any) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer func() {
				if v := recover(); v != nil {
					ch <- v
					panic(v)
				}
			}()
			next.ServeHTTP(w, r)
		})
	}
}

func TestMiddleware_panickingHandler(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	var renders atomic.Int32
	panics := make(chan any, 10)
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		if n == 1 {
			w.Header().Set("X-Partial", "yes")
			panic(errBoom)
		}
		fmt.Fprintf(w, "ok-%d", n)
	}), &bedOptions{wrap: panicsTo(panics), quiet: true})
	// A fresh connection per request: net/http's client would retry a GET
	// that failed on a reused connection.
	b.client.Transport.(*http.Transport).DisableKeepAlives = true

	_, err := b.send(ctx, "GET", "/p")
	if !errors.Is(err, io.EOF) {
		t.Errorf("GET of a panicking handler: err = %v, want the connection closed (EOF)", err)
	}
	if v := redistest.Recv(t, ctx, panics, "the panic"); v != errBoom {
		t.Errorf("net/http saw panic %v, want %v", v, errBoom)
	}
	b.waitGone(t, "/p")
	b.get(t, "/p").check(t, 200, "MISS", "ok-2")
	b.get(t, "/p").check(t, 200, "HIT", "ok-2")
}

// TestMiddleware_panicWithWaiters: requests waiting for a render that
// panics render for themselves.
func TestMiddleware_panicWithWaiters(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 20*time.Second)
		g := newRenderGate(ctx, 1)
		panics := make(chan any, 10)
		b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := g.next()
			if n == 1 {
				panic(errBoom)
			}
			fmt.Fprintf(w, "ok-%d", n)
		}), &bedOptions{procs: 2, wrap: panicsTo(panics), quiet: true,
			// No polling: the other process learns of the failure from
			// its announcement, not by finding the key free first.
			cache: &cache.Options{PollInterval: 5 * time.Second}})
		b.client.Transport.(*http.Transport).DisableKeepAlives = true

		first := b.goSend(ctx, "GET", "/pw", procHeader, "0")
		redistest.Recv(t, ctx, g.started, "the first render")
		var waiters []<-chan sent
		for i := range 4 {
			waiters = append(waiters, b.goSend(ctx, "GET", "/pw", procHeader, strconv.Itoa(i%2)))
		}
		// Four waiters: two joined the render in its process, two wait
		// for it from the other.
		redistest.WaitFor(t, ctx, "the waiters", func() bool {
			st := b.stats()
			return st.Misses == 5 && st.Waits == 1
		})
		g.open()
		if r := redistest.Recv(t, ctx, first, "the panicking request"); !errors.Is(r.err, io.EOF) {
			t.Errorf("panicking request: %v, err %v; want the connection closed (EOF)", r.reply, r.err)
		}
		if v := redistest.Recv(t, ctx, panics, "the panic"); v != errBoom {
			t.Errorf("net/http saw panic %v", v)
		}
		bodies := map[string]bool{}
		for _, ch := range waiters {
			r := redistest.Recv(t, ctx, ch, "a waiter")
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.status != 200 || r.cache() != "BYPASS" || !strings.HasPrefix(r.body, "ok-") || bodies[r.body] {
				t.Errorf("waiter: %v, want a BYPASS rendered for itself", r)
			}
			bodies[r.body] = true
		}
		b.waitGone(t, "/pw")
		b.get(t, "/pw").check(t, 200, "MISS", "ok-6")
		b.get(t, "/pw", procHeader, "1").check(t, 200, "HIT", "ok-6")
	}, redistest.Redis8, redistest.Cluster)
}

func TestMiddleware_coalescing(t *testing.T) {
	const requests = 50
	tests := []struct {
		name  string
		procs int
	}{
		{"one process", 1},
		{"three processes", 3},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testContext(t, 30*time.Second)
				release := make(chan struct{})
				rc := s.Client(t)
				counter := redistest.Key(t, "renders")
				b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					n, err := rc.Incr(ctx, counter).Result() // counted where every process sees it
					if err != nil {
						http.Error(w, err.Error(), 500)
						return
					}
					block(ctx, release)
					fmt.Fprintf(w, "coalesced render %d", n)
				}), &bedOptions{procs: tt.procs})

				var replies []<-chan sent
				for i := range requests {
					replies = append(replies, b.goSend(ctx, "GET", "/c", procHeader, strconv.Itoa(i%tt.procs)))
				}
				// Every request has missed, and each other process waits
				// for the one rendering.
				redistest.WaitFor(t, ctx, "all requests to wait", func() bool {
					st := b.stats()
					return st.Misses == requests && st.Waits == uint64(tt.procs-1)
				})
				close(release)
				misses := 0
				for _, ch := range replies {
					r := redistest.Recv(t, ctx, ch, "a reply")
					if r.err != nil {
						t.Fatal(r.err)
					}
					if r.status != 200 || r.body != "coalesced render 1" || (r.cache() != "MISS" && r.cache() != "HIT") {
						t.Errorf("reply %v", r)
					}
					if r.cache() == "MISS" {
						misses++
					}
				}
				if misses == 0 {
					t.Error("no reply was a MISS")
				}
				if n, err := b.rc.Get(ctx, counter).Int(); err != nil || n != 1 {
					t.Errorf("renders = %d (%v), want 1", n, err)
				}
				b.get(t, "/c").check(t, 200, "HIT", "coalesced render 1")
			})
		}
	}, redistest.Redis8, redistest.Cluster)
}

// TestMiddleware_waitTimeout: while one render hangs, requests for the
// same response wait WaitTimeout for it, in its process or another, and
// then render for themselves.
func TestMiddleware_waitTimeout(t *testing.T) {
	tests := []struct {
		name string
		proc string // of the waiter; the hanging render is in "0"
	}{
		{"same process", "0"},
		{"other process", "1"},
	}
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testContext(t, 20*time.Second)
			g := newRenderGate(ctx, 1)
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := g.next()
				fmt.Fprintf(w, "render-%d", n)
			}), &bedOptions{procs: 2, mw: &middleware.Options{WaitTimeout: 50 * time.Millisecond}})

			first := b.goSend(ctx, "GET", "/wt", procHeader, "0")
			redistest.Recv(t, ctx, g.started, "the first render")
			// The render still hangs: the waiter can only be answered by
			// giving up on it.
			waiterCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			w := redistest.Recv(t, waiterCtx, b.goSend(ctx, "GET", "/wt", procHeader, tt.proc), "the waiter to give up")
			if w.err != nil {
				t.Fatal(w.err)
			}
			w.check(t, 200, "BYPASS", "render-2")
			g.open()
			r := redistest.Recv(t, ctx, first, "the first request")
			if r.err != nil {
				t.Fatal(r.err)
			}
			r.check(t, 200, "MISS", "render-1")
			// The client is answered before the render is written, and a
			// 50ms WaitTimeout is short enough for a loaded machine to miss.
			b.waitStored(t, "/wt", "render-1")
			b.get(t, "/wt", procHeader, tt.proc).check(t, 200, "HIT", "render-1")
		})
	}
}

// Client disconnects: what happens to the shared render when the client
// whose request renders it goes away. The render must go on (bounded by
// the cache's LoadTimeout), be stored and answer every waiter, in its
// process and in others, so that no anonymous client can re-open a
// stampede by hanging up.

// firstHeader marks the request whose client the test sends away. The
// handlers ignore it and it is not part of any key.
const firstHeader = "X-Test-First"

// clientWatch is a wrapper (bedOptions.wrap) around each process's cached
// handler that reports, for the request marked with firstHeader, when its
// server-side context ends (the server saw the client go) and when the
// middleware has returned from it.
type clientWatch struct {
	goneOnce, returnedOnce sync.Once
	gone, returned         chan struct{}
}

func newClientWatch() *clientWatch {
	return &clientWatch{gone: make(chan struct{}), returned: make(chan struct{})}
}

func (cw *clientWatch) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(firstHeader) == "" {
			next.ServeHTTP(w, r)
			return
		}
		stop := context.AfterFunc(r.Context(), func() { cw.goneOnce.Do(func() { close(cw.gone) }) })
		defer func() {
			// Also when the middleware panics (which net/http reports).
			// From here on the server ends the context itself.
			stop()
			cw.returnedOnce.Do(func() { close(cw.returned) })
		}()
		next.ServeHTTP(w, r)
	})
}

// TestMiddleware_clientGone: the first client of a missing response goes
// away while (or before) its request renders, with 8 requests from 2
// processes waiting for that render. The render goes on, on a context the
// client's departure does not end, and is stored; every waiter is answered
// with it; the handler runs once.
func TestMiddleware_clientGone(t *testing.T) {
	tests := []struct {
		name    string
		method  string // of the first client
		waiters int
		// hold is where the first request is held, by an Observer on its
		// cache miss, until its client has gone: "" (not held: the client
		// goes during the render), "gone" (until the server has seen it go,
		// so the render may be asked of the request or not, at random),
		// "returned" (until the middleware has returned from the request,
		// so the render is asked for only afterwards). With "gone", the
		// request usually sees its client go before the loader asks it to
		// render; when both are ready at once, it declines the job.
		hold   string
		panics bool // the handler panics once its client has gone
	}{
		{name: "during the render", method: "GET", waiters: 8},
		{name: "during the render, HEAD", method: "HEAD", waiters: 8},
		{name: "during the render, nobody waiting", method: "GET"},
		{name: "as the render is asked for", method: "GET", waiters: 8, hold: "gone"},
		{name: "before the render", method: "GET", waiters: 8, hold: "returned"},
		{name: "the handler panics after", method: "GET", waiters: 8, panics: true},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testContext(t, 30*time.Second)
				cw := newClientWatch()
				var renders, misses atomic.Int32
				started, release := make(chan struct{}), make(chan struct{})
				panics := make(chan any, 10)
				h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					n := renders.Add(1)
					if r.Context().Value(http.ServerContextKey) == nil {
						// The render's context keeps the request's values.
						http.Error(w, "no request values", http.StatusInternalServerError)
						return
					}
					if n == 1 {
						close(started)
						// A handler that gives up when its request is
						// cancelled, as handlers should.
						select {
						case <-release:
						case <-r.Context().Done():
							http.Error(w, "cancelled", http.StatusServiceUnavailable)
							return
						}
						if tt.panics {
							panic(errBoom)
						}
					}
					w.Header().Set("Cache-Control", "max-age=60")
					fmt.Fprintf(w, "render-%d", n)
				})
				var hold <-chan struct{}
				switch tt.hold {
				case "gone":
					hold = cw.gone
				case "returned":
					hold = cw.returned
				}
				b := newTestBed(t, s, h, &bedOptions{
					procs: 2,
					wrap:  func(next http.Handler) http.Handler { return cw.wrap(panicsTo(panics)(next)) },
					quiet: true,
					cache: &cache.Options{Observer: func(e cache.Event) {
						if e.Kind == cache.EventMiss && misses.Add(1) == 1 && hold != nil {
							block(ctx, hold)
						}
					}},
				})

				firstCtx, cancelFirst := context.WithCancel(ctx)
				defer cancelFirst()
				first := b.goSend(firstCtx, tt.method, "/dc", procHeader, "0", firstHeader, "1")
				if hold != nil {
					// The client goes before the handler runs: wait for the
					// first miss (the request is in the middleware, past its
					// lookup), then hang up.
					redistest.WaitFor(t, ctx, "the first miss", func() bool { return misses.Load() >= 1 })
					cancelFirst()
					redistest.Recv(t, ctx, cw.gone, "the server to see the client go")
					redistest.Recv(t, ctx, started, "the render")
				} else {
					redistest.Recv(t, ctx, started, "the render")
				}

				var waiters []<-chan sent
				for i := range tt.waiters {
					waiters = append(waiters, b.goSend(ctx, "GET", "/dc", procHeader, strconv.Itoa(i%2)))
				}
				// Every waiter has missed: those in process 0 joined the
				// first request's flight, those in process 1 wait for its
				// claim.
				redistest.WaitFor(t, ctx, "the waiters", func() bool {
					st := b.stats()
					return st.Misses == uint64(1+tt.waiters) && (tt.waiters == 0 || st.Waits == 1)
				})
				if hold == nil {
					cancelFirst()
					redistest.Recv(t, ctx, cw.gone, "the server to see the client go")
				}
				close(release)

				if r := redistest.Recv(t, ctx, first, "the first request"); !errors.Is(r.err, context.Canceled) {
					t.Errorf("first request: %v, err %v; want it cancelled", r.reply, r.err)
				}
				if tt.panics {
					if v := redistest.Recv(t, ctx, panics, "the panic"); v != errBoom {
						t.Errorf("net/http saw panic %v, want %v", v, errBoom)
					}
				}
				statuses := map[string]int{}
				for _, ch := range waiters {
					r := redistest.Recv(t, ctx, ch, "a waiter")
					if r.err != nil {
						t.Fatal(r.err)
					}
					statuses[r.cache()]++
					switch {
					case tt.panics:
						// Nothing to share: each renders for itself, as
						// when the client stays (TestMiddleware_panicWithWaiters).
						if r.status != 200 || r.cache() != "BYPASS" || !strings.HasPrefix(r.body, "render-") || r.body == "render-1" {
							t.Errorf("waiter: %v, want a BYPASS rendered for itself", r)
						}
					case r.status != 200 || r.body != "render-1" || (r.cache() != "HIT" && r.cache() != "MISS"):
						t.Errorf("waiter: %v, want 200 HIT (or MISS) render-1", r)
					}
				}
				n := int(renders.Load())
				if tt.panics {
					if n != 1+tt.waiters {
						t.Errorf("%d renders, want %d (one each)", n, 1+tt.waiters)
					}
					b.waitGone(t, "/dc")
					return
				}
				if n != 1 {
					t.Errorf("%d renders for %d requests (X-Cache of the waiters: %v); want 1", n, 1+tt.waiters, statuses)
				}
				// Stored, for both processes.
				b.waitStored(t, "/dc", "render-1")
				b.get(t, "/dc", procHeader, "0").check(t, 200, "HIT", "render-1")
				b.get(t, "/dc", procHeader, "1").check(t, 200, "HIT", "render-1")
				if n := renders.Load(); n != 1 {
					t.Errorf("%d renders after the hits, want 1", n)
				}
			})
		}
	}, redistest.Redis8, redistest.Cluster)
}

// TestMiddleware_renderOutlastsLoad: a render that outlasts the cache's
// LoadTimeout while its client waits goes on for that client (its
// context does not end: the client is still there), which gets it as a
// BYPASS; the load has failed for the waiters and nothing is stored.
func TestMiddleware_renderOutlastsLoad(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	var renders atomic.Int32
	started, release, loadFailed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var loadFailedOnce sync.Once
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		if n == 1 {
			close(started)
			select {
			case <-release:
			case <-r.Context().Done():
				http.Error(w, "cancelled", http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintf(w, "render-%d", n)
	}), &bedOptions{cache: &cache.Options{
		LoadTimeout: 50 * time.Millisecond,
		Observer: func(e cache.Event) {
			if e.Kind == cache.EventLoad && e.Err != nil {
				loadFailedOnce.Do(func() { close(loadFailed) })
			}
		},
	}})

	first := b.goSend(ctx, "GET", "/ol")
	redistest.Recv(t, ctx, started, "the render")
	redistest.Recv(t, ctx, loadFailed, "the load to time out")
	close(release)
	r := redistest.Recv(t, ctx, first, "the first request")
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.check(t, 200, "BYPASS", "render-1")
	b.waitGone(t, "/ol")
	b.get(t, "/ol").check(t, 200, "MISS", "render-2")
}

// TestMiddleware_clientGone_streaming: a render that streams (an event
// stream that flushes, passed through to its client and stored for
// nobody) ends with its client, as without the cache, not with the
// load's much later timeout.
func TestMiddleware_clientGone_streaming(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	flushed, ended := make(chan struct{}), make(chan struct{})
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: tick\n\n")
		http.NewResponseController(w).Flush()
		close(flushed)
		select {
		case <-r.Context().Done():
			close(ended)
		case <-ctx.Done():
		}
	}), &bedOptions{cache: &cache.Options{LoadTimeout: time.Hour}})
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sent := b.goSend(cctx, "GET", "/stream")
	redistest.Recv(t, ctx, flushed, "the stream to start")
	cancel()
	redistest.Recv(t, ctx, ended, "the stream's context to end with its client")
	if r := redistest.Recv(t, ctx, sent, "the stream's client"); r.err == nil {
		t.Errorf("the stream's client got %v", r.reply)
	}
}
