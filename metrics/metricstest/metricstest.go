// Package metricstest provides scenarios for the tests and benchmarks of
// a metrics adapter built on package metrics, as net/http/httptest does
// for HTTP: caches, a middleware and locks driven against a real server
// until they have reported known Events, requests, and the benchmarks of
// an Observer's hot path. The modules stampedeprom and stampedeotel test
// with it; what each asserts about its own metrics stays in its tests.
//
// It is for tests only: its functions fail the test (testing.TB) they
// are given rather than return errors, and they need a Redis-protocol
// server, reached through the clients they are given.
package metricstest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/hotkv/stampede/middleware"
	"github.com/redis/go-redis/v9"
)

// Context returns a context that ends after 20 seconds or with the test.
func Context(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// Get requests path from srv with the header pairs hdr and returns its
// X-Cache.
func Get(tb testing.TB, srv *httptest.Server, path string, hdr ...string) string {
	tb.Helper()
	req, err := http.NewRequestWithContext(Context(tb), http.MethodGet, srv.URL+path, nil)
	if err != nil {
		tb.Fatal(err)
	}
	for i := 0; i < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Header.Get("X-Cache")
}

// NewMiddleware returns a Middleware caching for a minute in a Cache of
// its own on rc (in a namespace of its own), reporting to obs. The Cache
// is closed when the test ends.
func NewMiddleware(tb testing.TB, rc cache.RedisClient, obs func(middleware.Event)) *middleware.Middleware {
	tb.Helper()
	c, err := cache.New(rc, &cache.Options{Namespace: redistest.Key(tb, "ns")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	mw, err := middleware.New(c, &middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: time.Minute}, Observer: obs})
	if err != nil {
		tb.Fatal(err)
	}
	return mw
}

// BenchObserver measures the cost of one Event in the Observers co, lo
// and mo, on the goroutine that did the work, from many goroutines at
// once.
func BenchObserver(b *testing.B, co func(cache.Event), lo func(lock.Event), mo func(middleware.Event)) {
	ctx := context.Background() // Event.Context: the call's, never nil
	benches := []struct {
		name string
		fn   func()
	}{
		{"cache-hit", func() { co(cache.Event{Kind: cache.EventHit, Key: "user:42", Context: ctx}) }},
		{"cache-near-hit", func() { co(cache.Event{Kind: cache.EventHit, Key: "user:42", Near: true, Context: ctx}) }},
		{"cache-load", func() {
			co(cache.Event{Kind: cache.EventLoad, Key: "user:42", Duration: 3 * time.Millisecond, Context: ctx})
		}},
		{"lock-obtained", func() {
			lo(lock.Event{Kind: lock.EventObtained, Key: "job", Duration: time.Millisecond, Context: ctx})
		}},
		{"middleware-hit", func() {
			mo(middleware.Event{Kind: middleware.EventHit, Route: "/users/{id}", Duration: 200 * time.Microsecond,
				Method: http.MethodGet, Status: http.StatusOK, Context: ctx})
		}},
	}
	for _, bb := range benches {
		b.Run(bb.name, func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					bb.fn()
				}
			})
		})
	}
}

// BenchNearHit measures near-cache hits, the cheapest path an Observer
// runs on, without and with the Observer that observer returns: the
// difference is what the Observer costs. newClient connects to a server
// that supports client-side caching (Redis 6 or later); each
// sub-benchmark closes the client it made.
func BenchNearHit(b *testing.B, newClient func() redis.UniversalClient, observer func(tb testing.TB) func(cache.Event)) {
	for _, observed := range []bool{false, true} {
		name := "without-observer"
		if observed {
			name = "with-observer"
		}
		b.Run(name, func(b *testing.B) {
			opts := &cache.Options{Namespace: redistest.Key(b, "ns"), Expiry: cache.ExpiryPolicy{Fresh: time.Hour}, Near: &cache.Near{MaxEntries: 100}}
			if observed {
				opts.Observer = observer(b)
			}
			rc := newClient()
			defer rc.Close()
			c, err := cache.New(rc, opts)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := Context(b)
			redistest.WaitFor(b, ctx, "near cache active", c.NearActive)
			load := func(context.Context) (string, error) { return "value", nil }
			redistest.WaitFor(b, ctx, "a near hit", func() bool {
				before := c.Stats().NearHits
				_, _ = cache.GetOrLoad(ctx, c, "k", load)
				return c.Stats().NearHits > before
			})
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := cache.GetOrLoad(ctx, c, "k", load); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			st := c.Stats()
			b.ReportMetric(float64(st.NearHits)/float64(st.Hits), "near-share")
		})
	}
}
