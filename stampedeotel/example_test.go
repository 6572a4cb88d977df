package stampedeotel_test

import (
	"context"
	"fmt"
	"log"
	"slices"

	"github.com/alicebob/miniredis/v2"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/stampedeotel"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A cache recorded by the Telemetry: its events as a counter, its load as
// a histogram and a span. In a service the providers are the ones set up
// with their exporters (or the global ones: New(nil)).
func Example() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()

	reader, spans := sdkmetric.NewManualReader(), tracetest.NewSpanRecorder()
	tel, err := stampedeotel.New(&stampedeotel.Options{
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
	})
	if err != nil {
		panic(err)
	}
	c, err := cache.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), &cache.Options{
		Observer: tel.CacheObserver("users"),
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	for range 3 { // a miss and its load, then two hits
		_, _ = cache.GetOrLoad(ctx, c, "user:42", func(context.Context) (string, error) { return "Ada", nil })
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, p := range d.DataPoints {
				if p.Value > 0 {
					lines = append(lines, fmt.Sprintf("%s %s = %d", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Value))
				}
			}
		case metricdata.Histogram[float64]:
			for _, p := range d.DataPoints {
				lines = append(lines, fmt.Sprintf("%s %s: %d recorded", m.Name, p.Attributes.Encoded(attribute.DefaultEncoder()), p.Count))
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	for _, s := range spans.Ended() {
		fmt.Println("span", s.Name())
	}
	// Output:
	// stampede.cache.events stampede.cache=users,stampede.event=hit,stampede.tier=server = 2
	// stampede.cache.events stampede.cache=users,stampede.event=load = 1
	// stampede.cache.events stampede.cache=users,stampede.event=miss = 1
	// stampede.cache.events stampede.cache=users,stampede.event=served = 1
	// stampede.cache.load.duration stampede.cache=users,stampede.result=ok: 1 recorded
	// span stampede.cache.load
}

func loadUser(ctx context.Context) (string, error) { return "Ada", ctx.Err() }

// The snippet of docs/observability.md (docs_test.go checks it): metrics
// and spans on the global providers, and a load span inside the caller's
// trace. Compiled, not run: it connects to a server on localhost:6379.
func Example_service() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	// The global MeterProvider and TracerProvider; or &stampedeotel.Options{
	// MeterProvider, TracerProvider, Buckets, MaxRoutes, SpanKeys}.
	tel, err := stampedeotel.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	c, err := cache.New(rdb, &cache.Options{Observer: tel.CacheObserver("users")})
	if err != nil {
		log.Fatal(err)
	}
	if err := tel.CacheStats("users", c); err != nil {
		log.Fatal(err)
	}
	// tel.LockObserver and tel.MiddlewareObserver as with stampedeprom.
	ctx := context.Background()
	u, err := cache.GetOrLoad(ctx, c, "user:42", stampedeotel.Traced(tel, "load user", loadUser)) // a load span inside the caller's trace
	fmt.Println(u, err)
}
