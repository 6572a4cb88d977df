package middleware_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/middleware"
	"github.com/redis/go-redis/v9"
)

// This file tests what the middleware does, over real HTTP (httptest
// servers on loopback) in front of real servers from the test bed. Several
// Middleware+Cache pairs on one namespace behind one httptest server stand
// for several processes behind one load balancer. Freshness moves with a
// settable clock given to both the middleware and the cache (Options.Now);
// renders are sequenced with channels, never by sleeping.

// settableClock is an Options.Now that only moves when told to. It is safe
// for concurrent use.
type settableClock struct {
	mu  sync.Mutex
	now time.Time
}

func newSettableClock() *settableClock {
	return &settableClock{now: time.Now().Truncate(time.Second)}
}

func (c *settableClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *settableClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// procHeader picks which "process" of a testBed serves a request. It is
// not part of any key and handlers ignore it.
const procHeader = "X-Test-Proc"

// testBed is one or more Middleware+Cache pairs on a real server, in a
// namespace of their own, in front of a handler served over loopback.
type testBed struct {
	srv    *httptest.Server
	client *http.Client
	rc     redis.UniversalClient // a client of the bed's server, for inspecting it
	ns     string
	clock  *settableClock
	caches []*cache.Cache
}

type bedOptions struct {
	procs int                             // Middleware+Cache pairs; default 1
	mw    *middleware.Options             // for each pair; Now defaults to the bed's clock
	cache *cache.Options                  // for each pair; Namespace is the bed's, Now defaults to its clock
	wrap  func(http.Handler) http.Handler // around each pair's cached handler
	quiet bool                            // discard net/http's log (panics)

	// router, if set, builds each pair's handler from its Middleware
	// instead of m.Handler(h) (e.g. a chi router with r.Use(m.Handler)).
	router func(m *middleware.Middleware, c *cache.Cache) http.Handler
}

func newTestBed(tb testing.TB, s *redistest.Server, h http.Handler, o *bedOptions) *testBed {
	tb.Helper()
	if o == nil {
		o = &bedOptions{}
	}
	procs := max(o.procs, 1)
	b := &testBed{
		rc:    s.Client(tb),
		ns:    "mw" + strings.TrimPrefix(redistest.Key(tb, ""), "test:"),
		clock: newSettableClock(),
	}
	handlers := make([]http.Handler, procs)
	for i := range procs {
		var co cache.Options
		if o.cache != nil {
			co = *o.cache
		}
		co.Namespace = b.ns
		if co.Now == nil {
			co.Now = b.clock.Now
		}
		c, err := cache.New(s.Client(tb), &co)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = c.Close() })
		b.caches = append(b.caches, c)

		var mo middleware.Options
		if o.mw != nil {
			mo = *o.mw
		}
		if mo.Now == nil {
			mo.Now = b.clock.Now
		}
		m, err := middleware.New(c, &mo)
		if err != nil {
			tb.Fatal(err)
		}
		if o.router != nil {
			handlers[i] = o.router(m, c)
		} else {
			handlers[i] = m.Handler(h)
		}
		if o.wrap != nil {
			handlers[i] = o.wrap(handlers[i])
		}
	}
	b.serve(tb, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(r.Header.Get(procHeader))
		if err != nil || i < 0 || i >= procs {
			i = 0
		}
		handlers[i].ServeHTTP(w, r)
	}), o.quiet)
	return b
}

// serve starts the bed's server in front of h. It is closed at cleanup
// before the caches (cleanups run last-in first-out); handlers blocked on
// a test's gate are released by the test's context ending first.
func (b *testBed) serve(tb testing.TB, h http.Handler, quiet bool) {
	tb.Helper()
	b.srv = httptest.NewUnstartedServer(h)
	if quiet {
		b.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	}
	b.srv.Start()
	tb.Cleanup(b.srv.Close)
	b.client = b.srv.Client()
	tr := b.client.Transport.(*http.Transport)
	tr.DisableCompression = true // send Accept-Encoding only when a test does
	b.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
}

// reply is what a client received.
type reply struct {
	status int
	header http.Header
	body   string
}

func (r reply) cache() string { return r.header.Get("X-Cache") }

func (r reply) String() string {
	return fmt.Sprintf("%d X-Cache=%s body=%.80q", r.status, r.cache(), r.body)
}

// check fails tb unless r has this status, X-Cache value and body.
func (r reply) check(tb testing.TB, status int, xcache, body string) {
	tb.Helper()
	if r.status != status || r.cache() != xcache || r.body != body {
		tb.Errorf("got %v, want %d X-Cache=%s body=%q", r, status, xcache, body)
	}
}

// send makes a request; hdr holds name, value pairs ("Host" sets the Host
// header).
func (b *testBed) send(ctx context.Context, method, path string, hdr ...string) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, method, b.srv.URL+path, nil)
	if err != nil {
		return reply{}, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if http.CanonicalHeaderKey(hdr[i]) == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := b.client.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: res.StatusCode, header: res.Header, body: string(body)}, nil
}

func (b *testBed) do(tb testing.TB, method, path string, hdr ...string) reply {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := b.send(ctx, method, path, hdr...)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	return r
}

func (b *testBed) get(tb testing.TB, path string, hdr ...string) reply {
	tb.Helper()
	return b.do(tb, http.MethodGet, path, hdr...)
}

// goSend sends a request in a goroutine and delivers the outcome.
func (b *testBed) goSend(ctx context.Context, method, path string, hdr ...string) <-chan sent {
	ch := make(chan sent, 1)
	go func() {
		r, err := b.send(ctx, method, path, hdr...)
		ch <- sent{r, err}
	}()
	return ch
}

type sent struct {
	reply
	err error
}

// valueKey is the server key holding the entry for a GET of path on the
// bed's server; vary holds the "\nvary Name: value" suffixes of a variant
// (of the generation path's marker names now).
func (b *testBed) valueKey(path string, vary ...string) string {
	return b.ns + ":{" + redisx.Tag(b.userKey(path, vary...)) + "}"
}

// userKey is the cache key (before hashing) of target's entry; vary holds
// the "\nvary Name: value" suffixes of a variant, which is looked for in
// the generation that target's marker names now.
func (b *testBed) userKey(target string, vary ...string) string {
	if len(vary) == 0 {
		return "GET " + b.srv.URL + target
	}
	return "GET " + b.srv.URL + target + b.generation(target) + strings.Join(vary, "")
}

// generation is the line that the variant keys of target's current
// generation have: "\ngeneration " and the Version of the marker stored
// under target's key, read straight from the server; "" without one.
func (b *testBed) generation(target string) string {
	raw, err := b.rc.Get(context.Background(), b.valueKey(target)).Bytes()
	if err != nil {
		return ""
	}
	e, err := codec.Decode(raw)
	if err != nil {
		return ""
	}
	var mk struct {
		Status  int
		Vary    []string
		Version uint64
	}
	if cache.Msgpack.Unmarshal(e.Payload, &mk) != nil || mk.Status != 0 || len(mk.Vary) == 0 {
		return ""
	}
	return "\ngeneration " + strconv.FormatUint(mk.Version, 36)
}

// stored reports whether the server holds an entry for path.
func (b *testBed) stored(tb testing.TB, path string, vary ...string) bool {
	tb.Helper()
	n, err := b.rc.Exists(context.Background(), b.valueKey(path, vary...)).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return n == 1
}

// ttl is the server's remaining time to live of path's entry.
func (b *testBed) ttl(tb testing.TB, path string) time.Duration {
	tb.Helper()
	d, err := b.rc.PTTL(context.Background(), b.valueKey(path)).Result()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

func (b *testBed) stats() cache.Stats {
	var sum cache.Stats
	for _, c := range b.caches {
		sum = sum.Add(c.Stats())
	}
	return sum
}

// testContext bounds a test's waits; it ends before the test's cleanups
// run, which releases any handler still blocked on a gate.
func testContext(tb testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(tb.Context(), d)
	tb.Cleanup(cancel)
	return ctx
}

// renderGate holds one render of a test handler: the handler calls next
// first, and the nth render signals started and waits until open is
// called (or ctx ends) before it goes on.
type renderGate struct {
	ctx     context.Context
	nth     int32
	renders atomic.Int32
	started chan struct{}
	release chan struct{}
}

func newRenderGate(ctx context.Context, nth int32) *renderGate {
	return &renderGate{ctx: ctx, nth: nth, started: make(chan struct{}, 1), release: make(chan struct{})}
}

// next counts a render and returns its number, holding the nth.
func (g *renderGate) next() int32 {
	n := g.renders.Add(1)
	if n == g.nth {
		g.started <- struct{}{}
		block(g.ctx, g.release)
	}
	return n
}

// open lets the held render go on.
func (g *renderGate) open() { close(g.release) }

// block waits for gate or the end of ctx.
func block(ctx context.Context, gate <-chan struct{}) {
	select {
	case <-gate:
	case <-ctx.Done():
	}
}

// waitGone waits until the server holds nothing for path: a render that
// was not stored frees its claim on the key only after its client has
// been answered.
func (b *testBed) waitGone(tb testing.TB, path string, vary ...string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	redistest.WaitFor(tb, ctx, "no entry for "+path, func() bool { return !b.stored(tb, path, vary...) })
}

// getAfterUnstored GETs path after a render that stored nothing (an
// error, a 405, a response it may not store) whose entry is gone
// (waitGone). That render's flight can still be ending in this process
// (its claim freed, its notice sent, the call not yet returned; on a busy
// machine that takes a while): a request that joins it shares its outcome,
// as every waiter of such a render does, and renders for itself without
// storing (BYPASS). Stats.Coalesced tells; such a request is answered only
// after that flight ended, so the next one starts its own. joined is how
// many requests joined (and rendered) before the one returned.
func (b *testBed) getAfterUnstored(tb testing.TB, path string) (r reply, joined int) {
	tb.Helper()
	for {
		coalesced := b.stats().Coalesced
		r = b.get(tb, path)
		if b.stats().Coalesced == coalesced || r.cache() != "BYPASS" || joined == 2 {
			return r, joined
		}
		tb.Logf("a request joined the ending flight of a render that stored nothing: %v", r)
		joined++
	}
}

// waitStored waits until path's entry on the server contains marker. A
// client is answered before its render is written.
func (b *testBed) waitStored(tb testing.TB, path, marker string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	redistest.WaitFor(tb, ctx, "an entry with "+marker, func() bool {
		raw, err := b.rc.Get(ctx, b.valueKey(path)).Bytes()
		return err == nil && bytes.Contains(raw, []byte(marker))
	})
}

// ---------------------------------------------------------------------------
// The key

func TestMiddleware_keyNormalisation(t *testing.T) {
	tests := []struct {
		name        string
		first, then []string // path, then header pairs
		same        bool
	}{
		{"query order", []string{"/k?a=1&b=2"}, []string{"/k?b=2&a=1"}, true},
		{"query escaping", []string{"/k?a+b=%7E"}, []string{"/k?a%20b=~"}, true},
		{"ignored parameter differs", []string{"/k?a=1&utm_source=x"}, []string{"/k?utm_source=y&a=1"}, true},
		{"ignored parameter absent", []string{"/k?a=1&utm_source=x"}, []string{"/k?a=1"}, true},
		{"other value", []string{"/k?a=1"}, []string{"/k?a=2"}, false},
		{"extra parameter", []string{"/k?a=1"}, []string{"/k?a=1&b="}, false},
		{"empty query", []string{"/k"}, []string{"/k?"}, true},
		{"path case", []string{"/K"}, []string{"/k"}, false},
		{"trailing slash", []string{"/k"}, []string{"/k/"}, false},
		{"escaped slash", []string{"/a%2Fb"}, []string{"/a/b"}, false},
		{"host case", []string{"/k", "Host", "Example.COM"}, []string{"/k", "Host", "example.com"}, true},
		{"default port", []string{"/k", "Host", "example.com:80"}, []string{"/k", "Host", "example.com"}, true},
		{"other port", []string{"/k", "Host", "example.com:8080"}, []string{"/k", "Host", "example.com"}, false},
		{"other host", []string{"/k", "Host", "a.example.com"}, []string{"/k", "Host", "b.example.com"}, false},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				var renders atomic.Int32
				b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					fmt.Fprintf(w, "render %d of %s %s", renders.Add(1), r.Host, r.URL.RequestURI())
				}), &bedOptions{mw: &middleware.Options{IgnoreQuery: []string{"utm_source"}}})
				first := b.get(t, tt.first[0], tt.first[1:]...)
				if first.cache() != "MISS" || !strings.HasPrefix(first.body, "render 1 of ") {
					t.Fatalf("first: %v, want a MISS by render 1", first)
				}
				then := b.get(t, tt.then[0], tt.then[1:]...)
				if tt.same {
					then.check(t, 200, "HIT", first.body)
				} else if then.cache() != "MISS" || !strings.HasPrefix(then.body, "render 2 of ") {
					t.Errorf("then: %v, want a MISS by render 2", then)
				}
			})
		}
	}, redistest.Redis8, redistest.Cluster)
}

func TestMiddleware_unsafeMethodsBypass(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %d", r.Method, renders.Add(1))
	}), &bedOptions{mw: &middleware.Options{NoInvalidation: true}}) // see TestMiddleware_invalidation
	b.get(t, "/m").check(t, 200, "MISS", "GET 1")
	for i, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
		b.do(t, method, "/m").check(t, 200, "BYPASS", fmt.Sprintf("%s %d", method, i+2))
	}
	b.get(t, "/m").check(t, 200, "HIT", "GET 1")
	b.get(t, "/m", "X-HTTP-Method-Override", "POST").check(t, 200, "HIT", "GET 1")
	if n := renders.Load(); n != 6 {
		t.Errorf("renders = %d, want 6", n)
	}
}

// ---------------------------------------------------------------------------
// Freshness

func TestMiddleware_ttl(t *testing.T) {
	tests := []struct {
		name         string
		cc           string
		opts         middleware.Options
		fresh, stale time.Duration // 0, 0: not stored
	}{
		{"Options.TTL", "", middleware.Options{TTL: 30 * time.Second}, 30 * time.Second, 0},
		{"default TTL", "public", middleware.Options{}, time.Minute, 0},
		{"max-age over TTL", "max-age=50", middleware.Options{TTL: 30 * time.Second}, 50 * time.Second, 0},
		{"s-maxage over max-age", "max-age=50, s-maxage=70", middleware.Options{TTL: 30 * time.Second}, 70 * time.Second, 0},
		{"s-maxage first", "s-maxage=70, max-age=50", middleware.Options{}, 70 * time.Second, 0},
		{"quoted and upper case", `MAX-AGE="45"`, middleware.Options{}, 45 * time.Second, 0},
		{"Options.StaleTTL", "max-age=50", middleware.Options{StaleTTL: 15 * time.Second}, 50 * time.Second, 15 * time.Second},
		{"stale-while-revalidate over StaleTTL", "max-age=50, stale-while-revalidate=20", middleware.Options{StaleTTL: 15 * time.Second}, 50 * time.Second, 20 * time.Second},
		{"larger of the stale windows", "max-age=50, stale-while-revalidate=20, stale-if-error=40", middleware.Options{}, 50 * time.Second, 40 * time.Second},
		{"must-revalidate: no stale", "max-age=50, must-revalidate, stale-while-revalidate=20", middleware.Options{StaleTTL: 15 * time.Second}, 50 * time.Second, 0},
		{"proxy-revalidate: no stale", "max-age=50, proxy-revalidate", middleware.Options{StaleTTL: 15 * time.Second}, 50 * time.Second, 0},
		{"s-maxage: no StaleTTL", "s-maxage=50", middleware.Options{StaleTTL: 15 * time.Second}, 50 * time.Second, 0},
		{"s-maxage with its own stale-while-revalidate", "s-maxage=50, stale-while-revalidate=20", middleware.Options{StaleTTL: 15 * time.Second}, 50 * time.Second, 20 * time.Second},
		{"max-age=0", "max-age=0", middleware.Options{}, 0, 0},
		{"s-maxage=0 over max-age", "s-maxage=0, max-age=60", middleware.Options{}, 0, 0},
	}
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			opts := tt.opts
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tt.cc != "" {
					w.Header().Set("Cache-Control", tt.cc)
				}
				fmt.Fprintf(w, "r%d", renders.Add(1))
			}), &bedOptions{mw: &opts})
			if tt.fresh == 0 {
				b.get(t, "/t").check(t, 200, "BYPASS", "r1")
				b.get(t, "/t").check(t, 200, "BYPASS", "r2")
				b.waitGone(t, "/t")
				return
			}
			b.get(t, "/t").check(t, 200, "MISS", "r1")
			b.waitStored(t, "/t", "r1") // the client is answered before the write
			// The server drops the entry when its stale window ends.
			want := tt.fresh + tt.stale
			if got := b.ttl(t, "/t"); got > want || got < want-5*time.Second {
				t.Errorf("server TTL = %v, want %v", got, want)
			}
			b.clock.Advance(tt.fresh - time.Second)
			hit := b.get(t, "/t")
			hit.check(t, 200, "HIT", "r1")
			if age, want := hit.header.Get("Age"), strconv.Itoa(int((tt.fresh - time.Second).Seconds())); age != want {
				t.Errorf("Age = %s, want %s", age, want)
			}
			if tt.stale > 0 {
				b.clock.Advance(2 * time.Second)
				b.get(t, "/t").check(t, 200, "STALE", "r1")
			}
		})
	}
}

// TestMiddleware_staleWhileRevalidate: past max-age, within
// stale-while-revalidate, every request is answered at once with the
// stale response while exactly one render refreshes it in the background.
func TestMiddleware_staleWhileRevalidate(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 20*time.Second)
		g := newRenderGate(ctx, 2)
		b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := g.next()
			w.Header().Set("Cache-Control", "max-age=10, stale-while-revalidate=30")
			fmt.Fprintf(w, "body-v%d-end", n)
		}), nil)

		b.get(t, "/swr").check(t, 200, "MISS", "body-v1-end")
		b.waitStored(t, "/swr", "body-v1-end")
		b.clock.Advance(11 * time.Second)
		stale := b.get(t, "/swr")
		stale.check(t, 200, "STALE", "body-v1-end")
		if got := stale.header.Get("Age"); got != "11" {
			t.Errorf("Age = %s, want 11", got)
		}
		if got := stale.header.Get("Cache-Status"); got != "stampede; hit; fwd=stale" {
			t.Errorf("Cache-Status = %q", got)
		}
		redistest.Recv(t, ctx, g.started, "the background render")

		// While it runs, more requests get the stale response at once,
		// from this process and from another one.
		var replies []<-chan sent
		for i := range 6 {
			replies = append(replies, b.goSend(ctx, "GET", "/swr", procHeader, strconv.Itoa(i%2)))
		}
		for _, ch := range replies {
			r := redistest.Recv(t, ctx, ch, "a stale reply")
			if r.err != nil {
				t.Fatal(r.err)
			}
			r.check(t, 200, "STALE", "body-v1-end")
		}
		if n := g.renders.Load(); n != 2 {
			t.Errorf("renders = %d while refreshing, want 2", n)
		}
		g.open()
		b.waitStored(t, "/swr", "body-v2-end")
		fresh := b.get(t, "/swr")
		fresh.check(t, 200, "HIT", "body-v2-end")
		if got := fresh.header.Get("Age"); got != "0" {
			t.Errorf("Age = %s after the refresh, want 0", got)
		}
		if n := g.renders.Load(); n != 2 {
			t.Errorf("renders = %d, want 2", n)
		}
	}, redistest.Redis8, redistest.Valkey)
}

// TestMiddleware_staleRefreshJobFirst: the refresh that a stale hit starts
// may ask for its render before GetOrLoad has returned the stale response
// to the request (an Observer holds GetOrLoad back here until the refresh
// is rendering). The request must still be answered at once with the
// stale response, not render the refresh itself and keep its client
// waiting.
func TestMiddleware_staleRefreshJobFirst(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	var renders, staleEvents atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		if n == 2 {
			close(started)
			block(ctx, release)
		}
		w.Header().Set("Cache-Control", "max-age=10, stale-while-revalidate=30")
		fmt.Fprintf(w, "body-v%d-end", n)
	}), &bedOptions{cache: &cache.Options{Observer: func(e cache.Event) {
		if e.Kind == cache.EventStale && staleEvents.Add(1) == 1 {
			block(ctx, started) // GetOrLoad returns only once the refresh renders
		}
	}}})
	b.get(t, "/jf").check(t, 200, "MISS", "body-v1-end")
	b.waitStored(t, "/jf", "body-v1-end")
	b.clock.Advance(11 * time.Second)
	waitCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r := redistest.Recv(t, waitCtx, b.goSend(ctx, "GET", "/jf"), "the stale reply while the refresh renders")
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.check(t, 200, "STALE", "body-v1-end")
	close(release)
	b.waitStored(t, "/jf", "body-v2-end")
	b.get(t, "/jf").check(t, 200, "HIT", "body-v2-end")
	if n := renders.Load(); n != 2 {
		t.Errorf("renders = %d, want 2", n)
	}
}

// TestMiddleware_staleIfError: once the handler fails, the stale response
// goes on being served through the stale-if-error window; after it, the
// request reaches the handler again.
func TestMiddleware_staleIfError(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	var renders atomic.Int32
	var failing atomic.Bool
	failed := make(chan int32, 10)
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		if failing.Load() {
			defer func() { failed <- n }()
			http.Error(w, "boom", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Cache-Control", "max-age=10, stale-if-error=60")
		fmt.Fprintf(w, "good-%d", n)
	}), &bedOptions{cache: &cache.Options{RefreshBackoff: time.Hour}})

	b.get(t, "/sie").check(t, 200, "MISS", "good-1")
	b.waitStored(t, "/sie", "good-1")
	if got, want := b.ttl(t, "/sie"), 70*time.Second; got > want || got < want-5*time.Second {
		t.Errorf("server TTL = %v, want %v", got, want)
	}
	failing.Store(true)
	b.clock.Advance(11 * time.Second)
	b.get(t, "/sie").check(t, 200, "STALE", "good-1")
	if n := redistest.Recv(t, ctx, failed, "the failed background render"); n != 2 {
		t.Errorf("failed render %d, want 2", n)
	}
	b.get(t, "/sie").check(t, 200, "STALE", "good-1")
	b.clock.Advance(49 * time.Second) // 60s old: still within the window
	r := b.get(t, "/sie")
	r.check(t, 200, "STALE", "good-1")
	if got := r.header.Get("Age"); got != "60" {
		t.Errorf("Age = %s, want 60", got)
	}
	if n := renders.Load(); n != 2 {
		t.Errorf("renders = %d within the window, want 2 (RefreshBackoff holds retries)", n)
	}

	// The window ends at 70s, when the server drops the entry (its TTL,
	// checked above). The test clock cannot move the server's, so do what
	// the server does.
	b.clock.Advance(11 * time.Second)
	if err := b.rc.Del(ctx, b.valueKey("/sie")).Err(); err != nil {
		t.Fatal(err)
	}
	b.get(t, "/sie").check(t, 500, "BYPASS", "boom\n")
	b.waitGone(t, "/sie")
	failing.Store(false)
	r, joined := b.getAfterUnstored(t, "/sie")
	want := fmt.Sprintf("good-%d", 4+joined) // a request that joined rendered good-4
	r.check(t, 200, "MISS", want)
	b.get(t, "/sie").check(t, 200, "HIT", want)
}

// ---------------------------------------------------------------------------
// Headers out

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
				{"GET", "MISS", "stampede; fwd=miss; stored", "0", 0},
				{"GET", "HIT", "stampede; hit", "7", 7 * time.Second},
				{"GET", "HIT", "stampede; hit", "12", 5500 * time.Millisecond},
				{"POST", "BYPASS", "stampede; fwd=bypass", "", 0},
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

// ---------------------------------------------------------------------------
// What passes through

// TestMiddleware_streamsLargeBody: a body far beyond StoreLimit reaches the
// client whole and in order, with the heap staying far below its size, and
// is not stored.
func TestMiddleware_streamsLargeBody(t *testing.T) {
	const (
		chunk = 32 << 10
		total = 64 << 20
	)
	var patterns [8][]byte
	for i := range patterns {
		patterns[i] = bytes.Repeat([]byte{byte('a' + i)}, chunk)
	}
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renders.Add(1)
		buf := make([]byte, chunk)
		for i := range total / chunk {
			copy(buf, patterns[i%len(patterns)])
			binary.BigEndian.PutUint64(buf, uint64(i))
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	}), &bedOptions{mw: &middleware.Options{StoreLimit: 1 << 20}})

	for round := 1; round <= 2; round++ {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base, peak := ms.HeapInuse, ms.HeapInuse

		req, err := http.NewRequestWithContext(testContext(t, time.Minute), "GET", b.srv.URL+"/big", nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := b.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Header.Get("X-Cache"); got != "BYPASS" {
			t.Errorf("round %d: X-Cache = %q, want BYPASS", round, got)
		}
		buf := make([]byte, chunk)
		for i := range total / chunk {
			if _, err := io.ReadFull(res.Body, buf); err != nil {
				t.Fatalf("round %d: chunk %d: %v", round, i, err)
			}
			if got := binary.BigEndian.Uint64(buf); got != uint64(i) || !bytes.Equal(buf[8:], patterns[i%len(patterns)][8:]) {
				t.Fatalf("round %d: chunk %d is wrong (numbered %d)", round, i, got)
			}
			if i%64 == 0 {
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
		if n, err := io.Copy(io.Discard, res.Body); n != 0 || err != nil {
			t.Errorf("round %d: %d bytes past the end, err %v", round, n, err)
		}
		res.Body.Close()
		if grew := int64(peak) - int64(base); grew > 16<<20 {
			t.Errorf("round %d: heap in use grew by %d MiB while streaming %d MiB", round, grew>>20, total>>20)
		}
	}
	if n := renders.Load(); n != 2 {
		t.Errorf("renders = %d, want 2 (nothing stored)", n)
	}
	b.waitGone(t, "/big")
}

func TestMiddleware_storeLimitBoundary(t *testing.T) {
	const limit = 4096
	s := redistest.Shared(t, redistest.Redis8)
	tests := []struct {
		name   string
		size   int
		stored bool
	}{
		{"at the limit", limit, true},
		{"one byte over", limit + 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body := bytes.Repeat([]byte{'0' + byte(renders.Add(1))}, tt.size)
				for len(body) > 0 { // in uneven writes
					n := min(len(body), 1000)
					_, _ = w.Write(body[:n])
					body = body[n:]
				}
			}), &bedOptions{mw: &middleware.Options{StoreLimit: limit}})
			one, two := strings.Repeat("1", tt.size), strings.Repeat("2", tt.size)
			if tt.stored {
				b.get(t, "/s").check(t, 200, "MISS", one)
				b.get(t, "/s").check(t, 200, "HIT", one)
			} else {
				b.get(t, "/s").check(t, 200, "BYPASS", one)
				b.get(t, "/s").check(t, 200, "BYPASS", two)
			}
		})
	}
}

// TestMiddleware_flush: a handler that flushes streams to its client
// before it returns, is not stored, and a request waiting for its render
// renders for itself.
func TestMiddleware_flush(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 20*time.Second)
	var renders atomic.Int32
	release := make(chan struct{})
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		fmt.Fprintf(w, "first-%d;", n)
		if err := http.NewResponseController(w).Flush(); err != nil {
			panic(err)
		}
		if n == 1 {
			block(ctx, release)
		}
		fmt.Fprint(w, "second")
	}), nil)

	req, err := http.NewRequestWithContext(ctx, "GET", b.srv.URL+"/f", nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.client.Do(req) // returns once the headers are flushed
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if got := res.Header.Get("X-Cache"); got != "BYPASS" {
		t.Errorf("X-Cache = %q, want BYPASS", got)
	}
	head := make([]byte, len("first-1;"))
	if _, err := io.ReadFull(res.Body, head); err != nil || string(head) != "first-1;" {
		t.Fatalf("read %q, %v before the handler returned", head, err)
	}
	waiter := b.goSend(ctx, "GET", "/f")
	redistest.WaitFor(t, ctx, "the second request to wait for the render", func() bool { return b.stats().Misses == 2 })
	close(release)
	rest, err := io.ReadAll(res.Body)
	if err != nil || string(rest) != "second" {
		t.Errorf("rest = %q, %v", rest, err)
	}
	w := redistest.Recv(t, ctx, waiter, "the waiter")
	if w.err != nil {
		t.Fatal(w.err)
	}
	w.check(t, 200, "BYPASS", "first-2;second")
	b.get(t, "/f").check(t, 200, "BYPASS", "first-3;second")
	b.waitGone(t, "/f")
}

func TestMiddleware_hijack(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := fmt.Sprintf("hijacked-%d", renders.Add(1))
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			http.Error(w, err.Error(), http.StatusTeapot)
			return
		}
		defer conn.Close()
		fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
		_ = rw.Flush()
	}), nil)
	for i := 1; i <= 2; i++ {
		r := b.get(t, "/hj")
		if r.status != 200 || r.body != fmt.Sprintf("hijacked-%d", i) || r.header.Get("X-Cache") != "" {
			t.Errorf("request %d: %v", i, r)
		}
	}
	b.waitGone(t, "/hj")
}

// ---------------------------------------------------------------------------
// Failures

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

func TestMiddleware_statuses(t *testing.T) {
	always := func(int, http.Header) bool { return true }
	tests := []struct {
		name   string
		status int
		opts   middleware.Options
		stored bool
	}{
		{"200", 200, middleware.Options{}, true},
		{"204", 204, middleware.Options{}, true},
		{"301", 301, middleware.Options{}, true},
		{"404", 404, middleware.Options{}, true},
		{"410", 410, middleware.Options{}, true},
		{"501 (heuristically cacheable)", 501, middleware.Options{}, true},
		{"302", 302, middleware.Options{}, false},
		{"206", 206, middleware.Options{}, false},
		{"400", 400, middleware.Options{}, false},
		{"500", 500, middleware.Options{}, false},
		{"502", 502, middleware.Options{}, false},
		{"503", 503, middleware.Options{}, false},
		{"504", 504, middleware.Options{}, false},
		{"Statuses without 200", 200, middleware.Options{Statuses: []int{404}}, false},
		{"Statuses with 404", 404, middleware.Options{Statuses: []int{404}}, true},
		{"ShouldCache yes to 302", 302, middleware.Options{ShouldCache: func(s int, _ http.Header) bool { return s == 302 }}, true},
		{"ShouldCache no to 200", 200, middleware.Options{ShouldCache: func(s int, _ http.Header) bool { return s == 302 }}, false},
		{"ShouldCache reads the header", 200, middleware.Options{ShouldCache: func(_ int, h http.Header) bool { return h.Get("X-Kind") == "status-test" }}, true},
		{"ShouldCache cannot store a 500", 500, middleware.Options{ShouldCache: always}, false},
		{"ShouldCache cannot store a 503", 503, middleware.Options{ShouldCache: always}, false},
	}
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			opts := tt.opts
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := renders.Add(1)
				w.Header().Set("X-Kind", "status-test")
				w.Header().Set("X-Render", strconv.Itoa(int(n)))
				if tt.status == 302 || tt.status == 301 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(tt.status)
				if tt.status != 204 {
					fmt.Fprintf(w, "s%d", n)
				}
			}), &bedOptions{mw: &opts})
			body := func(n int) string {
				if tt.status == 204 {
					return ""
				}
				return fmt.Sprintf("s%d", n)
			}
			first, second := b.get(t, "/st"), b.get(t, "/st")
			if tt.stored {
				first.check(t, tt.status, "MISS", body(1))
				second.check(t, tt.status, "HIT", body(1))
			} else {
				first.check(t, tt.status, "BYPASS", body(1))
				second.check(t, tt.status, "BYPASS", body(2))
			}
			if got := second.header.Get("X-Render"); tt.stored && got != "1" {
				t.Errorf("X-Render = %s on a hit", got)
			}
			if tt.stored && !b.stored(t, "/st") {
				t.Error("no entry on the server")
			} else if !tt.stored {
				b.waitGone(t, "/st")
			}
		})
	}
}

// ---------------------------------------------------------------------------
// One render for many requests

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

func TestMiddleware_allowNoCache(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	tests := []struct {
		name  string
		allow bool
	}{
		{"off", false},
		{"on", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				fmt.Fprintf(w, "v%d", renders.Add(1))
			}), &bedOptions{mw: &middleware.Options{AllowNoCache: tt.allow}})
			b.get(t, "/n").check(t, 200, "MISS", "v1")
			if !tt.allow {
				b.get(t, "/n", "Cache-Control", "no-cache").check(t, 200, "HIT", "v1")
				b.get(t, "/n", "Pragma", "no-cache").check(t, 200, "HIT", "v1")
				b.get(t, "/n", "Cache-Control", "max-age=0").check(t, 200, "HIT", "v1")
			} else {
				b.get(t, "/n", "Cache-Control", "no-cache").check(t, 200, "MISS", "v2")
				b.get(t, "/n").check(t, 200, "HIT", "v2")
				b.get(t, "/n", "Pragma", "no-cache").check(t, 200, "MISS", "v3")
				b.get(t, "/n").check(t, 200, "HIT", "v3")
			}
			// no-store is honoured either way: rendered, not stored.
			next := renders.Load() + 1
			b.get(t, "/n", "Cache-Control", "no-store").check(t, 200, "BYPASS", fmt.Sprintf("v%d", next))
			b.get(t, "/n").check(t, 200, "HIT", fmt.Sprintf("v%d", next-1))
		})
	}
}

// ---------------------------------------------------------------------------
// chi

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
