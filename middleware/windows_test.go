package middleware_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
	"github.com/redis/go-redis/v9"
)

// The windows between a purge (or a write) and the end of a render that
// began before it: whatever exit the render takes (stored, answered
// stale on its failure, shared with waiters, a client's no-cache render,
// the retry after a tag purge), the purge wins. One test per way out,
// each of which failed before the rule was asked there (issue 39).

// gatedRenders is a handler whose renders numbered in hold wait, each
// until its gate is opened (or ctx ends), after saying they started.
// Every render's body is "render N"; renders from failFrom on answer
// 502.
type gatedRenders struct {
	ctx      context.Context
	cc       string
	tag      string
	failFrom int32
	renders  atomic.Int32
	started  map[int32]chan struct{}
	gates    map[int32]chan struct{}
}

func newGatedRenders(ctx context.Context, cc string, hold ...int32) *gatedRenders {
	g := &gatedRenders{ctx: ctx, cc: cc, started: map[int32]chan struct{}{}, gates: map[int32]chan struct{}{}}
	for _, n := range hold {
		g.started[n], g.gates[n] = make(chan struct{}, 1), make(chan struct{})
	}
	return g
}

func (g *gatedRenders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.WriteHeader(http.StatusNoContent) // a write that succeeded
		return
	}
	n := g.renders.Add(1)
	if started, ok := g.started[n]; ok {
		started <- struct{}{}
		block(g.ctx, g.gates[n])
	}
	w.Header().Set("Cache-Control", g.cc)
	if g.tag != "" {
		w.Header().Set("Surrogate-Key", g.tag)
	}
	if g.failFrom != 0 && n >= g.failFrom {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	fmt.Fprintf(w, "render %d", n)
}

// hold waits until render n has started.
func (g *gatedRenders) hold(t *testing.T, n int32) {
	t.Helper()
	redistest.Recv(t, g.ctx, g.started[n], fmt.Sprintf("render %d", n))
}

func (g *gatedRenders) open(n int32) { close(g.gates[n]) }

// TestPurgeURL_duringStaleIfErrorRender: a page purged while the render
// that revalidates it fails is not served in its place (stale-if-error),
// neither to that render's client nor to the requests of other processes
// that waited for it.
func TestPurgeURL_duringStaleIfErrorRender(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 30*time.Second)
	g := newGatedRenders(ctx, "max-age=1", 2)
	g.failFrom = 2
	b := newTestBed(t, s, g, &bedOptions{procs: 2, mw: &middleware.Options{Freshness: middleware.FreshnessPolicy{StaleIfError: time.Minute}}, quiet: true})
	b.get(t, "/p").check(t, 200, "MISS", "render 1")
	b.waitStored(t, "/p", "render 1")
	b.clock.Advance(2 * time.Second)
	first := b.goSend(ctx, http.MethodGet, "/p", procHeader, "0")
	g.hold(t, 2)
	waiter := b.goSend(ctx, http.MethodGet, "/p", procHeader, "1")
	redistest.WaitFor(t, ctx, "the other process waiting for the render", func() bool {
		return b.caches[1].Stats().Waits >= 1
	})
	if err := b.mws[1].PurgeURL(ctx, b.srv.URL+"/p", nil); err != nil {
		t.Fatal(err)
	}
	g.open(2)
	for i, ch := range []<-chan sent{first, waiter} {
		got := redistest.Recv(t, ctx, ch, "an answer")
		if got.err != nil {
			t.Fatal(got.err)
		}
		if got.status == 200 || bytes.Contains([]byte(got.body), []byte("render 1")) {
			t.Errorf("process %d: %v: the page purged during the render answered in place of its failure", i, got.reply)
		}
	}
}

// TestPurge_duringNoCacheRender: a client's no-cache render (AllowNoCache)
// that was running when a PurgeURL or a POST to the URL came is not
// stored: the next request renders again.
func TestPurge_duringNoCacheRender(t *testing.T) {
	for _, how := range []string{"PurgeURL", "POST"} {
		t.Run(how, func(t *testing.T) {
			redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
				ctx := testContext(t, 30*time.Second)
				g := newGatedRenders(ctx, "max-age=60", 2)
				b := newTestBed(t, s, g, &bedOptions{mw: &middleware.Options{AllowNoCache: true}})
				b.get(t, "/p").check(t, 200, "MISS", "render 1")
				b.waitStored(t, "/p", "render 1")
				forced := b.goSend(ctx, http.MethodGet, "/p", "Cache-Control", "no-cache")
				g.hold(t, 2)
				if how == "POST" {
					b.do(t, http.MethodPost, "/p").check(t, http.StatusNoContent, "BYPASS", "")
				} else if err := b.mws[0].PurgeURL(ctx, b.srv.URL+"/p", nil); err != nil {
					t.Fatal(err)
				}
				g.open(2)
				got := redistest.Recv(t, ctx, forced, "the no-cache render's answer")
				if got.err != nil || got.body != "render 2" {
					t.Fatalf("the no-cache render answered %v, %v", got.reply, got.err)
				}
				b.get(t, "/p").check(t, 200, "MISS", "render 3")
			})
		})
	}
}

// TestPurgeTag_duringRetry: a tag purged again while the render that
// replaced a render overtaken by its first purge runs: the requests that
// waited, in another process, get a render that began after the last
// purge, one for the cluster, rather than each rendering alone.
func TestPurgeTag_duringRetry(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 30*time.Second)
	g := newGatedRenders(ctx, "max-age=60", 1, 2)
	g.tag = "t"
	b := newTestBed(t, s, g, &bedOptions{procs: 2, mw: tagOptions()})
	first := b.goSend(ctx, http.MethodGet, "/p", procHeader, "0")
	g.hold(t, 1)
	waiter := b.goSend(ctx, http.MethodGet, "/p", procHeader, "1")
	redistest.WaitFor(t, ctx, "the other process waiting for the render", func() bool {
		return b.caches[1].Stats().Waits >= 1
	})
	if err := b.mws[1].PurgeTag(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	g.open(1)
	g.hold(t, 2) // the load's render again, overtaken by the next purge
	b.clock.Advance(2 * time.Second)
	if err := b.mws[1].PurgeTag(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(2 * time.Second) // the next render begins after it by more than ClockSkew
	g.open(2)
	if got := redistest.Recv(t, ctx, first, "the first client's answer"); got.err != nil || got.body != "render 1" {
		t.Fatalf("first client: %v, %v", got.reply, got.err)
	}
	got := redistest.Recv(t, ctx, waiter, "the waiter's answer")
	if got.err != nil {
		t.Fatal(got.err)
	}
	got.check(t, 200, "HIT", "render 3")
	b.get(t, "/p", procHeader, "0").check(t, 200, "HIT", "render 3")
}

// TestPurgeTag_recordLostDuringRender: a tag purged during a render whose
// record is then lost (evicted, or a failover to a replica that missed
// it) is not taken for a tag never purged: a missing record means purged
// at an unknown time, and the render is not stored.
func TestPurgeTag_recordLostDuringRender(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 30*time.Second)
	g := newGatedRenders(ctx, "max-age=1", 2)
	g.tag = "t"
	o := tagOptions()
	o.Freshness.Stale = time.Hour
	b := newTestBed(t, s, g, &bedOptions{mw: o})
	b.get(t, "/p").check(t, 200, "MISS", "render 1")
	b.waitStored(t, "/p", "render 1")
	b.clock.Advance(2 * time.Second)
	b.get(t, "/p").check(t, 200, "STALE", "render 1") // its refresh is render 2
	g.hold(t, 2)
	if err := b.mws[0].PurgeTag(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := b.rc.Del(ctx, b.valueKeyOf("tag\nt")).Err(); err != nil {
		t.Fatal(err)
	}
	g.open(2)
	redistest.WaitFor(t, ctx, "the refresh stored", func() bool {
		raw, err := b.rc.Get(ctx, b.valueKey("/p")).Bytes()
		return err == nil && !bytes.Contains(raw, []byte("render 1"))
	})
	raw, _ := b.rc.Get(ctx, b.valueKey("/p")).Bytes()
	if bytes.Contains(raw, []byte("render 2")) {
		t.Fatal("the render overtaken by the purge was stored: its tag's record was lost, which is no proof of no purge")
	}
}

// TestMiddleware_varyChangedByDeploy: after a deploy changes what a page
// varies on, requests for the new variants share one render each and
// are stored, as for any page, instead of each rendering alone until the
// old Vary's marker ends.
func TestMiddleware_varyChangedByDeploy(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		var vary atomic.Value
		vary.Store("X-A")
		var renders atomic.Int32
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := renders.Add(1)
			v := vary.Load().(string)
			w.Header().Set("Cache-Control", "max-age=1")
			w.Header().Set("Vary", v)
			fmt.Fprintf(w, "render %d for %s=%s", n, v, r.Header.Get(v))
		})
		b := newTestBed(t, s, h, nil)
		b.get(t, "/v", "X-A", "1", "X-B", "1").check(t, 200, "MISS", "render 1 for X-A=1")
		b.get(t, "/v", "X-A", "1", "X-B", "1").check(t, 200, "HIT", "render 1 for X-A=1")
		vary.Store("X-B") // the deploy
		b.clock.Advance(2 * time.Second)
		// Served stale while one refresh renders it with the new Vary,
		// which moves the page to a new generation of variants.
		b.get(t, "/v", "X-A", "1", "X-B", "1").check(t, 200, "STALE", "render 1 for X-A=1")
		ctx := testContext(t, 10*time.Second)
		redistest.WaitFor(t, ctx, "the base's marker naming the new Vary", func() bool {
			raw, err := b.rc.Get(ctx, b.valueKey("/v")).Bytes()
			return err == nil && bytes.Contains(raw, []byte("X-B"))
		})
		for i := range 2 {
			r := b.get(t, "/v", "X-A", "1", "X-B", "2")
			if i == 1 && r.cache() != "HIT" {
				t.Fatalf("second request for X-B=2: %v; want a HIT of the render the first stored", r)
			}
		}
		if n := renders.Load(); n != 3 {
			t.Errorf("%d renders, want 3", n)
		}
	})
}

// TestPurge_duringVaryMove: a PurgeURL that lands while a refresh renders
// the page with a new Vary (a deploy changed what it varies on, so the
// render would start a new generation of variants: moveGeneration) wins:
// the marker is not moved to the render's generation, nothing it rendered
// is served, and the next request renders. (The purge rule's row "a new
// Vary generation": the marker moves only if unchanged.)
func TestPurge_duringVaryMove(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testContext(t, 30*time.Second)
		var vary atomic.Value
		vary.Store("X-A")
		var renders atomic.Int32
		started, release := make(chan struct{}, 1), make(chan struct{})
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := renders.Add(1)
			if n == 2 {
				started <- struct{}{}
				block(ctx, release)
			}
			v := vary.Load().(string)
			w.Header().Set("Cache-Control", "max-age=1")
			w.Header().Set("Vary", v)
			fmt.Fprintf(w, "render %d for %s=%s", n, v, r.Header.Get(v))
		})
		background := make(chan middleware.Event, 4)
		b := newTestBed(t, s, h, &bedOptions{mw: &middleware.Options{Observer: func(e middleware.Event) {
			if e.Kind == middleware.EventBackground {
				background <- e
			}
		}}})
		b.get(t, "/v", "X-A", "1", "X-B", "1").check(t, 200, "MISS", "render 1 for X-A=1")
		vary.Store("X-B") // the deploy
		b.clock.Advance(2 * time.Second)
		b.get(t, "/v", "X-A", "1", "X-B", "1").check(t, 200, "STALE", "render 1 for X-A=1")
		redistest.Recv(t, ctx, started, "the refresh's render, with the new Vary")
		if err := b.mws[0].PurgeURL(ctx, b.srv.URL+"/v", nil); err != nil {
			t.Fatal(err)
		}
		close(release)
		redistest.Recv(t, ctx, background, "the refresh's end")
		raw, err := b.rc.Get(ctx, b.valueKey("/v")).Bytes()
		if err == nil && bytes.Contains(raw, []byte("X-B")) {
			t.Fatalf("the base holds a marker naming the refresh's Vary (X-B) after the purge (%d bytes)", len(raw))
		}
		r := b.get(t, "/v", "X-A", "1", "X-B", "1")
		r.check(t, 200, "MISS", "render 3 for X-B=1")
	})
}

// TestMiddleware_staleIfErrorIsNoStaleWhileRevalidate: a response's own
// stale-if-error lets it answer when its refresh fails, never in place
// of a refresh from a healthy origin (RFC 5861 4, RFC 9111 4.2.4).
func TestMiddleware_staleIfErrorIsNoStaleWhileRevalidate(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	o := &origin{cc: "max-age=1, stale-if-error=60"}
	b := newTestBed(t, s, o, &bedOptions{quiet: true})
	b.get(t, "/e").check(t, 200, "MISS", "body-1")
	b.waitStored(t, "/e", "body-1")
	b.clock.Advance(2 * time.Second)
	if r := b.get(t, "/e"); r.cache() == "STALE" || r.body == "body-1" {
		t.Fatalf("%v: served stale from a healthy origin: stale-if-error is no stale-while-revalidate", r)
	}
	b.waitStored(t, "/e", "body-2")
	b.clock.Advance(2 * time.Second)
	o.set(func(o *origin) { o.fail = http.StatusBadGateway })
	r := b.get(t, "/e")
	r.check(t, 200, "STALE", "body-2")
	if got := r.header.Get("Cache-Status"); !bytes.Contains([]byte(got), []byte("detail=stale-if-error")) {
		t.Errorf("Cache-Status %q: want detail=stale-if-error", got)
	}
}

// TestMiddleware_onlyIfCached: a request with only-if-cached is answered
// from storage, or 504 (RFC 9111 5.2.1.7); it never reaches the handler.
func TestMiddleware_onlyIfCached(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	o := &origin{cc: "max-age=60"}
	b := newTestBed(t, s, o, nil)
	b.get(t, "/o", "Cache-Control", "only-if-cached").check(t, http.StatusGatewayTimeout, "MISS", "")
	b.get(t, "/o", "Authorization", "x", "Cache-Control", "max-age=0, only-if-cached").check(t, http.StatusGatewayTimeout, "BYPASS", "")
	if n := o.renders.Load(); n != 0 {
		t.Fatalf("%d renders for only-if-cached requests, want 0", n)
	}
	b.get(t, "/o").check(t, 200, "MISS", "body-1")
	b.waitStored(t, "/o", "body-1")
	b.get(t, "/o", "Cache-Control", "only-if-cached").check(t, 200, "HIT", "body-1")
}

// failFirstDel is a go-redis hook that fails the first pipeline holding a
// DEL once armed, as a dropped connection does (no reply).
type failFirstDel struct{ armed atomic.Bool }

func (f *failFirstDel) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *failFirstDel) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (f *failFirstDel) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if c.Name() == "del" && f.armed.CompareAndSwap(true, false) {
				err := errors.New("injected: connection dropped")
				for _, c := range cmds {
					c.SetErr(err)
				}
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// TestInvalidate_deleteFailsOnce: a write's invalidation whose Delete
// fails (a dropped connection: a fact about that moment) is sent once
// more, and the page is gone for the next request.
func TestInvalidate_deleteFailsOnce(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testContext(t, 10*time.Second)
	g := newGatedRenders(ctx, "max-age=60")
	f := &failFirstDel{}
	b := newTestBed(t, s, g, &bedOptions{hook: f})
	b.get(t, "/p").check(t, 200, "MISS", "render 1")
	b.get(t, "/p").check(t, 200, "HIT", "render 1")
	f.armed.Store(true)
	b.do(t, http.MethodPost, "/p").check(t, http.StatusNoContent, "BYPASS", "")
	if f.armed.Load() {
		t.Fatal("the invalidation sent no DEL")
	}
	b.get(t, "/p").check(t, 200, "MISS", "render 2")
}

// TestPurge_duringRender: a PurgeURL or a POST while the cache's load
// renders a page (in another process) keeps that render out of the cache:
// its client gets it, and the next request renders again.
func TestPurge_duringRender(t *testing.T) {
	for _, how := range []string{"PurgeURL", "POST"} {
		t.Run(how, func(t *testing.T) {
			s := redistest.Shared(t, redistest.Redis8)
			ctx := testContext(t, 30*time.Second)
			g := newGatedRenders(ctx, "max-age=60", 1)
			b := newTestBed(t, s, g, &bedOptions{procs: 2})
			first := b.goSend(ctx, http.MethodGet, "/p", procHeader, "0")
			g.hold(t, 1)
			if how == "POST" {
				b.do(t, http.MethodPost, "/p", procHeader, "1").check(t, http.StatusNoContent, "BYPASS", "")
			} else if err := b.mws[1].PurgeURL(ctx, b.srv.URL+"/p", nil); err != nil {
				t.Fatal(err)
			}
			g.open(1)
			if got := redistest.Recv(t, ctx, first, "the render's client"); got.err != nil || got.body != "render 1" {
				t.Fatalf("the render's client: %v, %v", got.reply, got.err)
			}
			b.waitGone(t, "/p")
			b.get(t, "/p", procHeader, "1").check(t, 200, "MISS", "render 2")
		})
	}
}
