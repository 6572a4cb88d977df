package stampedeotel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/lock"
	"github.com/hotkv/stampede/metrics"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Options configures New. A nil *Options means all defaults.
type Options struct {
	// MeterProvider makes the instruments. Default: otel.GetMeterProvider(),
	// the global one.
	MeterProvider metric.MeterProvider
	// TracerProvider makes the spans. Default: otel.GetTracerProvider(),
	// the global one (which makes no spans until one is set).
	TracerProvider trace.TracerProvider
	// Buckets are the bucket boundaries, in seconds, advised for the
	// duration histograms, in increasing order (a View may override
	// them). Default: 0.5 ms, 1 ms, 2.5 ms, 5 ms, ... 10 s (14
	// boundaries).
	Buckets []float64
	// MaxRoutes bounds the distinct values of the http.route attribute of
	// each MiddlewareObserver's metrics: events of routes first seen after
	// this many are recorded under the route "other". Default: 100.
	MaxRoutes int
	// SpanKeys puts the cache or lock key on spans, as the attribute
	// stampede.key. Default: false; keys may hold what a trace backend
	// should not store.
	SpanKeys bool
}

func (o *Options) validate() error {
	if o == nil {
		return nil
	}
	if err := metrics.Validate(o.Buckets, o.MaxRoutes); err != nil {
		return fmt.Errorf("stampedeotel: %w", err)
	}
	return nil
}

func (o *Options) meterProvider() metric.MeterProvider {
	if o == nil || o.MeterProvider == nil {
		return otel.GetMeterProvider()
	}
	return o.MeterProvider
}

func (o *Options) tracerProvider() trace.TracerProvider {
	if o == nil || o.TracerProvider == nil {
		return otel.GetTracerProvider()
	}
	return o.TracerProvider
}

func (o *Options) buckets() []float64 {
	if o == nil || len(o.Buckets) == 0 {
		return metrics.DefaultBuckets()
	}
	return o.Buckets
}

func (o *Options) maxRoutes() int {
	if o == nil || o.MaxRoutes == 0 {
		return metrics.DefaultMaxRoutes
	}
	return o.MaxRoutes
}

// Attribute keys: this package's, and the semantic conventions' (see
// schemaURL).
const (
	keyCache      = attribute.Key("stampede.cache")
	keyLock       = attribute.Key("stampede.lock")
	keyMiddleware = attribute.Key("stampede.middleware")
	keyEvent      = attribute.Key("stampede.event")
	keyTier       = attribute.Key("stampede.tier")
	keyResult     = attribute.Key("stampede.result")
	keyReason     = attribute.Key("stampede.reason")
	keyKey        = attribute.Key("stampede.key")

	keyErrorType      = semconv.ErrorTypeKey
	keyRoute          = semconv.HTTPRouteKey
	keyMethod         = semconv.HTTPRequestMethodKey
	keyMethodOriginal = semconv.HTTPRequestMethodOriginalKey
	keyStatus         = semconv.HTTPResponseStatusCodeKey
)

// Telemetry records the metrics and spans of the caches, locks and
// middlewares whose Observers it made. Its methods are safe for concurrent
// use. Use New to create one.
type Telemetry struct {
	tracer    trace.Tracer
	spanKeys  bool
	maxRoutes int
	errTypes  errorTypes // the error.type names given
	// traced holds the loader contexts of the loads whose span Traced
	// made, until the CacheObserver that reports the load (and makes no
	// span of its own) takes them: context.Context → *tracedLoad.
	traced  sync.Map
	tracedN atomic.Int64 // notes in traced, give or take one being added or taken

	cacheEvents  metric.Int64ObservableCounter // reported from cacheTables
	cacheLoads   metric.Float64Histogram
	cacheWaits   metric.Float64Histogram
	cacheCallers metric.Int64Histogram
	lockEvents   metric.Int64ObservableCounter // reported from lockTables
	lockObtain   metric.Float64Histogram
	lockHeld     metric.Float64Histogram
	httpEvents   metric.Int64Counter
	httpDuration metric.Float64Histogram

	mu          sync.Mutex // guards caches, cacheTables and lockTables
	caches      map[string]*cache.Cache
	cacheTables []*eventTable[cache.EventKind] // appended to, never changed: a copy of the slice is safe to read
	lockTables  []*eventTable[lock.EventKind]
}

// New returns Telemetry recording with Options.MeterProvider and
// Options.TracerProvider. Its meter and tracer are named for this module's
// path, with its version (as the binary's build information records it;
// "devel" when it records none) and the schema of the semantic
// conventions followed. It fails if Options are invalid or the meter
// refuses an instrument.
func New(opts *Options) (*Telemetry, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	version := scopeVersion()
	meter := opts.meterProvider().Meter(scope, metric.WithInstrumentationVersion(version), metric.WithSchemaURL(schemaURL))
	t := &Telemetry{
		tracer:    opts.tracerProvider().Tracer(scope, trace.WithInstrumentationVersion(version), trace.WithSchemaURL(schemaURL)),
		spanKeys:  opts != nil && opts.SpanKeys,
		maxRoutes: opts.maxRoutes(),
		caches:    map[string]*cache.Cache{},
	}
	var errs []error
	observable := func(name, desc string) metric.Int64ObservableCounter {
		c, err := meter.Int64ObservableCounter(name, metric.WithUnit("{event}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	counter := func(name, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit("{event}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	buckets := opts.buckets()
	histogram := func(name, desc string) metric.Float64Histogram {
		h, err := meter.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc), metric.WithExplicitBucketBoundaries(buckets...))
		errs = append(errs, err)
		return h
	}
	t.cacheEvents = observable("stampede.cache.events",
		"Events of a cache.Cache by kind, the EventKind's String (hit, stale, miss, load, wait, fail-open, ...); stampede.tier is near or server for hits and stale hits.")
	t.cacheLoads = histogram("stampede.cache.load.duration",
		"How long the loader ran, by result (ok, not-found, error); a failure also by error.type.")
	t.cacheWaits = histogram("stampede.cache.wait.duration",
		"How long a call waited for another process's load until it was woken with the outcome, by result (ok, timeout, error); a failure also by error.type.")
	var err error
	t.cacheCallers, err = meter.Int64Histogram("stampede.cache.load.callers", metric.WithUnit("{call}"),
		metric.WithDescription("Calls of this process that one load answered (cache.Event.Callers): the one that ran it and those that joined it; for a background refresh, the stale values served meanwhile. Waiters in other processes count in their own stampede.cache.served."),
		metric.WithExplicitBucketBoundaries(metrics.CallerBuckets()...))
	errs = append(errs, err)
	t.lockEvents = observable("stampede.lock.events",
		"Events of a lock.Client by kind, the EventKind's String (obtained, not-obtained, released, lost, woken, ...).")
	t.lockObtain = histogram("stampede.lock.obtain.duration",
		"How long Obtain took, retries and waiting included, by result (obtained, not-obtained, obtain-failed); a failure also by error.type.")
	t.lockHeld = histogram("stampede.lock.held.duration", "How long a lock was held until Release.")
	t.httpEvents = counter("stampede.middleware.events",
		"Requests the middleware answered by kind (hit, stale, miss, bypass, canceled) and renders it finished in the background (background), by route, method, status code and reason.")
	t.httpDuration = histogram("stampede.middleware.duration",
		"How long the middleware took to answer a request, render or wait included; for background, how long the render took; by route, method, status code and kind, a failure also by error.type.")
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("stampedeotel: %w", err)
	}
	errs = append(errs, t.newStats(meter), t.registerEvents(meter))
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("stampedeotel: %w", err)
	}
	return t, nil
}

// span records a span named name, a child of the span in ctx (an
// Event.Context; nil stands for none), that ended now after running for
// d. failed marks it an error, described by err if err is not nil.
func (t *Telemetry) span(ctx context.Context, name string, d time.Duration, failed bool, err error, attrs ...attribute.KeyValue) {
	if ctx == nil {
		ctx = context.Background()
	}
	end := time.Now()
	_, s := t.tracer.Start(ctx, name, trace.WithTimestamp(end.Add(-d)),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	switch {
	case failed && err != nil:
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	case failed:
		s.SetStatus(codes.Error, "")
	}
	s.End(trace.WithTimestamp(end))
}

// Chain returns an Observer that calls each non-nil observer in turn, for
// an Options.Observer of package cache, lock or middleware that must feed
// more than one consumer: Chain(existing, tel.CacheObserver("users")). It
// returns nil when all are nil.
func Chain[E any](observers ...func(E)) func(E) { return metrics.Chain(observers...) }
