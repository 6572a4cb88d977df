package middleware_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
	"github.com/redis/go-redis/v9"
)

// This file holds the test bed most of the middleware's tests run on:
// real HTTP (httptest servers on loopback) in front of real servers from
// internal/testkit/redistest. Several Middleware+Cache pairs on one namespace
// behind one httptest server stand for several processes behind one load
// balancer. Freshness moves with a settable clock given to both the
// middleware and the cache (Options.Now); renders are sequenced with
// channels, never by sleeping.

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
	mws    []*middleware.Middleware // one per pair, as caches
}

type bedOptions struct {
	procs int                             // Middleware+Cache pairs; default 1
	mw    *middleware.Options             // for each pair; Now defaults to the bed's clock
	cache *cache.Options                  // for each pair; Namespace is the bed's, Now defaults to its clock
	wrap  func(http.Handler) http.Handler // around each pair's cached handler
	quiet bool                            // discard net/http's log (panics)
	hook  redis.Hook                      // added to each pair's client, if set

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
		rc := s.Client(tb)
		if o.hook != nil {
			rc.AddHook(o.hook)
		}
		c, err := cache.New(rc, &co)
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
		b.mws = append(b.mws, m)
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
	return b.valueKeyOf(b.userKey(path, vary...))
}

// valueKeyOf is the server key holding the entry of the cache key key.
func (b *testBed) valueKeyOf(key string) string {
	return b.ns + ":{" + redisx.Tag(key) + "}"
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
