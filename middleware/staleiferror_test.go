package middleware_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

// TestMiddleware_staleIfErrorOption: Freshness.StaleIfError. Past its freshness a stored response is never
// served without a render first, and answers in its place only when that
// render fails (a 5xx), within the grace; must-revalidate,
// proxy-revalidate, no-cache and s-maxage forbid it, and so does the end
// of the grace; a render that succeeds replaces it.
func TestMiddleware_staleIfErrorOption(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	const grace = time.Minute
	for _, tc := range []struct {
		name, cc, etag string
		graceful       bool
	}{
		{"no validator", "max-age=1", "", true},
		{"with an ETag", "max-age=1", `"v1"`, true},
		{"must-revalidate", "max-age=1, must-revalidate", "", false},
		{"proxy-revalidate", "max-age=1, proxy-revalidate", "", false},
		{"s-maxage", "s-maxage=1", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &origin{etag: tc.etag, cc: tc.cc}
			b := newTestBed(t, s, o, &bedOptions{mw: &middleware.Options{Freshness: middleware.FreshnessPolicy{StaleIfError: grace}}, quiet: true})
			b.get(t, "/e").check(t, 200, "MISS", "body-1")
			b.waitStored(t, "/e", "body-1")
			b.clock.Advance(2 * time.Second)
			o.set(func(o *origin) { o.fail = http.StatusBadGateway })
			if !tc.graceful {
				// Not kept (the server drops it when its freshness ends:
				// the bed's clock runs ahead of the server's), or kept to
				// be revalidated only.
				if tc.etag == "" {
					b.waitGone(t, "/e")
				}
				b.get(t, "/e").check(t, http.StatusBadGateway, "BYPASS", "")
				return
			}
			r := b.get(t, "/e")
			r.check(t, 200, "STALE", "body-1")
			if got := r.header.Get("Cache-Status"); got != "stampede; fwd=stale; fwd-status=502; ttl=-1; detail=stale-if-error" {
				t.Errorf("Cache-Status %q, want the stored response served in place of the render's 502", got)
			}
			if n := o.renders.Load(); n != 2 {
				t.Errorf("%d renders, want 2: the stale response is served only after a render failed", n)
			}
			// The origin is back: the next request renders, and its
			// response replaces the stored one (a 304 freshens it). (The
			// failed render frees its claim after its client is
			// answered; a request that found the claim would wait for it
			// and, told it failed, be answered stale too.)
			ctx := testContext(t, 10*time.Second)
			redistest.WaitFor(t, ctx, "the failed render's claim gone", func() bool {
				keys, err := b.rc.Keys(ctx, b.ns+":*").Result()
				// The failure's marker (NS:{K}:fail) stays a second.
				keys = slices.DeleteFunc(keys, func(k string) bool { return strings.HasSuffix(k, ":fail") })
				return err == nil && len(keys) == 1 // the stored response's
			})
			o.set(func(o *origin) { o.fail = 0 })
			want := "body-3"
			if tc.etag != "" {
				want = "body-1"
			}
			b.get(t, "/e").check(t, 200, "MISS", want)
			b.waitStored(t, "/e", want)
			// Past freshness and grace, a failure is the client's.
			b.clock.Advance(time.Second + grace + time.Second)
			o.set(func(o *origin) { o.fail = http.StatusServiceUnavailable })
			b.get(t, "/e").check(t, http.StatusServiceUnavailable, "BYPASS", "")
		})
	}
	t.Run("off by default", func(t *testing.T) {
		o := &origin{cc: "max-age=1"}
		b := newTestBed(t, s, o, &bedOptions{quiet: true})
		b.get(t, "/e").check(t, 200, "MISS", "body-1")
		b.waitStored(t, "/e", "body-1")
		b.clock.Advance(2 * time.Second)
		b.waitGone(t, "/e")
		o.set(func(o *origin) { o.fail = http.StatusBadGateway })
		b.get(t, "/e").check(t, http.StatusBadGateway, "BYPASS", "")
	})
}

// With Freshness.StaleIfError, the requests of other processes that wait
// for the one render of a kept response are answered with the stored
// response when that render fails, as its own client is: one render in
// the cluster, and no client gets the failure.
func TestMiddleware_staleIfErrorProcesses(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	entered, release := make(chan struct{}), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		w.Header().Set("Cache-Control", "max-age=1")
		if n == 1 {
			fmt.Fprint(w, "body-1")
			return
		}
		close(entered)
		<-release
		w.WriteHeader(http.StatusBadGateway)
	})
	b := newTestBed(t, s, h, &bedOptions{procs: 3, mw: &middleware.Options{Freshness: middleware.FreshnessPolicy{StaleIfError: time.Minute}}, quiet: true})
	b.get(t, "/w").check(t, 200, "MISS", "body-1")
	b.waitStored(t, "/w", "body-1")
	b.clock.Advance(2 * time.Second)
	ctx := testContext(t, 30*time.Second)
	first := b.goSend(ctx, http.MethodGet, "/w", procHeader, "0")
	redistest.Recv(t, ctx, entered, "the render of the kept response")
	others := []<-chan sent{b.goSend(ctx, http.MethodGet, "/w", procHeader, "1"), b.goSend(ctx, http.MethodGet, "/w", procHeader, "2")}
	redistest.WaitFor(t, ctx, "both other processes waiting for the render", func() bool {
		return b.caches[1].Stats().Waits >= 1 && b.caches[2].Stats().Waits >= 1
	})
	close(release)
	for i, ch := range append([]<-chan sent{first}, others...) {
		got := redistest.Recv(t, ctx, ch, "an answer")
		if got.err != nil {
			t.Fatalf("process %d: %v", i, got.err)
		}
		got.check(t, 200, "STALE", "body-1")
	}
	if n := renders.Load(); n != 2 {
		t.Errorf("%d renders, want 2: one for the cluster after the first", n)
	}
}
