package middleware_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

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
		if got := stale.header.Get("Cache-Status"); got != "stampede; hit; ttl=-1" { // served stale: a hit, past its freshness
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
// goes on being served through the stale-if-error window, each time in
// place of a render that failed (stale-if-error is no
// stale-while-revalidate: every request past freshness asks the handler
// first); after it, the handler's failure is the client's.
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
	}), &bedOptions{cache: &cache.Options{Expiry: cache.ExpiryPolicy{RefreshBackoff: time.Hour}}})

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
	// The failed render's flight can still be ending in this process when
	// its handler has returned: a request that joins it, or waits for its
	// claim, shares its failure (the stale response, by grace) without a
	// render of its own. The render count tells; such a request is asked
	// again.
	getOwn := func() reply {
		for i := 0; ; i++ {
			before := renders.Load()
			r := b.get(t, "/sie")
			r.check(t, 200, "STALE", "good-1")
			if renders.Load() > before || i == 2 {
				return r
			}
			t.Logf("a request shared the ending flight of a failed render: %v", r)
		}
	}
	getOwn()
	b.clock.Advance(49 * time.Second) // 60s old: still within the window
	r := getOwn()
	if got := r.header.Get("Age"); got != "60" {
		t.Errorf("Age = %s, want 60", got)
	}
	if n := renders.Load(); n != 4 {
		t.Errorf("renders = %d within the window, want 4: one per request past freshness", n)
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
	want := fmt.Sprintf("good-%d", 6+joined) // a request that joined rendered good-6
	r.check(t, 200, "MISS", want)
	b.get(t, "/sie").check(t, 200, "HIT", want)
}

func TestSmoke(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	c, err := cache.New(s.Client(t), &cache.Options{Namespace: "smoke" + time.Now().Format("150405.000")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var renders atomic.Int32
	h := middleware.Cache(c, time.Minute)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renders.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello "+r.URL.Query().Get("n"))
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	for i := range 3 {
		res, err := http.Get(srv.URL + "/x?n=1&a=2")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		t.Logf("%d %s %q X-Cache=%s Age=%s ETag=%s", i, res.Status, b, res.Header.Get("X-Cache"), res.Header.Get("Age"), res.Header.Get("Etag"))
	}
	if renders.Load() != 1 {
		t.Errorf("renders = %d", renders.Load())
	}
}
