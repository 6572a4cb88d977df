package stampedeotel_test

import (
	"context"
	"testing"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/metrics/metricstest"
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
	metricstest.BenchObserver(b, tel.CacheObserver("c"), tel.LockObserver("l"), tel.MiddlewareObserver("m"))
}

// Near-cache hits, the cheapest path an Observer runs on, without and with
// the Telemetry's Observer.
func BenchmarkNearHit(b *testing.B) {
	metricstest.BenchNearHit(b, redistest.Shared(b, redistest.Redis8).NewClient, func(tb testing.TB) func(cache.Event) {
		return newBenchTelemetry(tb).CacheObserver("c")
	})
}
