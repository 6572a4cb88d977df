package stampedeotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/hotkv/stampede/middleware"
	"github.com/hotkv/stampede/stampedeotel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace/noop"
)

// newBenchTelemetry records metrics with the SDK and spans with a no-op
// tracer (a span's cost is the exporter's, not this package's).
func newBenchTelemetry(tb testing.TB) *stampedeotel.Telemetry {
	tb.Helper()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	tb.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	tel, err := stampedeotel.New(&stampedeotel.Options{MeterProvider: mp, TracerProvider: noop.NewTracerProvider()})
	if err != nil {
		tb.Fatal(err)
	}
	return tel
}

// The cost of recording one Event, on the goroutine that did the work,
// from many goroutines at once.
func BenchmarkObserver(b *testing.B) {
	tel := newBenchTelemetry(b)
	co, lo, mo := tel.CacheObserver("c"), tel.LockObserver("l"), tel.MiddlewareObserver("m")
	benches := []struct {
		name string
		fn   func()
	}{
		{"cache-hit", func() { co(cache.Event{Kind: cache.EventHit, Key: "user:42"}) }},
		{"cache-near-hit", func() { co(cache.Event{Kind: cache.EventHit, Key: "user:42", Near: true}) }},
		{"cache-load", func() { co(cache.Event{Kind: cache.EventLoad, Key: "user:42", Duration: 3 * time.Millisecond}) }},
		{"lock-obtained", func() { lo(lock.Event{Kind: lock.EventObtained, Key: "job", Duration: time.Millisecond}) }},
		{"middleware-hit", func() {
			mo(middleware.Event{Kind: middleware.EventHit, Route: "/users/{id}", Duration: 200 * time.Microsecond})
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

// Near-cache hits, the cheapest path an Observer runs on, without and with
// the Telemetry's Observer.
func BenchmarkNearHit(b *testing.B) {
	s := redistest.Shared(b, redistest.Redis8)
	for _, observed := range []bool{false, true} {
		name := "without-observer"
		if observed {
			name = "with-observer"
		}
		b.Run(name, func(b *testing.B) {
			opts := &cache.Options{Namespace: redistest.Key(b, "ns"), TTL: time.Hour, Near: &cache.Near{MaxEntries: 100}}
			if observed {
				opts.Observer = newBenchTelemetry(b).CacheObserver("c")
			}
			rc := s.NewClient()
			defer rc.Close()
			c, err := cache.New(rc, opts)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			ctx := testCtx(b)
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
