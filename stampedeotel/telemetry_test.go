package stampedeotel_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/lock"
	"github.com/hotkv/stampede/metrics/metricstest"
	"github.com/hotkv/stampede/stampedeotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// bed is Telemetry with an SDK meter read by hand and a tracer recording
// every span.
type bed struct {
	tel    *stampedeotel.Telemetry
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

func newBed(tb testing.TB, opts *stampedeotel.Options) *bed {
	tb.Helper()
	b := &bed{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(b.reader))
	b.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans))
	tb.Cleanup(func() {
		_ = mp.Shutdown(context.Background())
		_ = b.tp.Shutdown(context.Background())
	})
	if opts == nil {
		opts = &stampedeotel.Options{}
	}
	opts.MeterProvider, opts.TracerProvider = mp, b.tp
	tel, err := stampedeotel.New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	b.tel = tel
	return b
}

// point returns the value of the data point of the metric name whose
// attributes are exactly kvs (for a histogram: its count, and its sum),
// or -1 when there is none.
func (b *bed) point(tb testing.TB, name string, kvs ...attribute.KeyValue) (v, sum float64) {
	tb.Helper()
	var rm metricdata.ResourceMetrics
	if err := b.reader.Collect(context.Background(), &rm); err != nil {
		tb.Fatal(err)
	}
	want := attribute.NewSet(kvs...)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return float64(p.Value), 0
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return float64(p.Value), 0
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return float64(p.Count), p.Sum
					}
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					if p.Attributes.Equals(&want) {
						return float64(p.Count), float64(p.Sum)
					}
				}
			default:
				tb.Fatalf("%s: unexpected data %T", name, m.Data)
			}
		}
	}
	return -1, 0
}

// metric returns the metric name as collected now, with its scope; it
// fails tb if there is none.
func (b *bed) metric(tb testing.TB, name string) (metricdata.Metrics, instrumentation.Scope) {
	tb.Helper()
	var rm metricdata.ResourceMetrics
	if err := b.reader.Collect(context.Background(), &rm); err != nil {
		tb.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				return m, sm.Scope
			}
		}
	}
	tb.Fatalf("no metric %s", name)
	return metricdata.Metrics{}, instrumentation.Scope{}
}

// pointSets returns the attribute sets of the data points of the
// histogram or int64 sum name.
func (b *bed) pointSets(tb testing.TB, name string) []attribute.Set {
	tb.Helper()
	m, _ := b.metric(tb, name)
	var sets []attribute.Set
	switch d := m.Data.(type) {
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			sets = append(sets, p.Attributes)
		}
	default:
		tb.Fatalf("%s: unexpected data %T", name, m.Data)
	}
	return sets
}

// childOf fails tb unless s, the span of what, is a child of parent: in
// its trace, with parent's span as its parent.
func childOf(tb testing.TB, what string, s sdktrace.ReadOnlySpan, parent trace.Span) {
	tb.Helper()
	p := parent.SpanContext()
	if s.SpanContext().TraceID() != p.TraceID() || s.Parent().SpanID() != p.SpanID() {
		tb.Errorf("%s span %q: trace %v, parent %v; want a child of %v in trace %v",
			what, s.Name(), s.SpanContext().TraceID(), s.Parent().SpanID(), p.SpanID(), p.TraceID())
	}
}

// only returns the one span of spans, failing tb if there is not one.
func only(tb testing.TB, what string, spans []sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	tb.Helper()
	if len(spans) != 1 {
		tb.Fatalf("%d %s spans, want 1", len(spans), what)
	}
	return spans[0]
}

// want fails tb unless the metric's value (see point) is v.
func (b *bed) want(tb testing.TB, v float64, name string, kvs ...attribute.KeyValue) {
	tb.Helper()
	if got, _ := b.point(tb, name, kvs...); got != v {
		tb.Errorf("%s %v = %v, want %v", name, kvs, got, v)
	}
}

// waitFor waits until the metric's value is v: the events of background
// work and the middleware's events after the response come after the
// call that caused them has returned.
func (b *bed) waitFor(tb testing.TB, v float64, name string, kvs ...attribute.KeyValue) {
	tb.Helper()
	redistest.WaitFor(tb, metricstest.Context(tb), fmt.Sprintf("%s %v = %v", name, kvs, v), func() bool {
		got, _ := b.point(tb, name, kvs...)
		return got == v
	})
}

// ended returns the ended spans named name.
func (b *bed) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range b.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// attr returns the value of s's attribute k, or "".
func attr(s sdktrace.ReadOnlySpan, k string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == k {
			return kv.Value.String()
		}
	}
	return ""
}

// withResult returns the spans whose stampede.result is r.
func withResult(spans []sdktrace.ReadOnlySpan, r string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if attr(s, "stampede.result") == r {
			out = append(out, s)
		}
	}
	return out
}

var (
	cacheAttr = attribute.Key("stampede.cache").String
	lockAttr  = attribute.Key("stampede.lock").String
	mwAttr    = attribute.Key("stampede.middleware").String
	event     = attribute.Key("stampede.event").String
	tier      = attribute.Key("stampede.tier").String
	result    = attribute.Key("stampede.result").String
	reason    = attribute.Key("stampede.reason").String
	route     = attribute.Key("http.route").String
	method    = attribute.Key("http.request.method").String
	status    = attribute.Key("http.response.status_code").Int
	errType   = attribute.Key("error.type").String
)

// A miss and its load, a hit, a not-found, a failed load, an entry that
// does not decode and a stale hit with its refresh on Redis 8: counted by
// kind, loads timed, a span per load whose times are the histogram's.
func TestCacheObserver(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := metricstest.Context(t)
	b := newBed(t, nil)
	clk := &metricstest.Clock{}
	ns := redistest.Key(t, "ns")
	rdb := s.Client(t)
	c, err := cache.New(rdb, &cache.Options{Namespace: ns, Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute},
		Now: clk.Now, Observer: b.tel.CacheObserver("users")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := b.tel.CacheStats("users", c); err != nil {
		t.Fatal(err)
	}
	const events, loads = "stampede.cache.events", "stampede.cache.load.duration"
	users := cacheAttr("users")

	for range 2 {
		if v, err := cache.GetOrLoad(ctx, c, "a", metricstest.LoadString("A")); v != "A" || err != nil {
			t.Fatalf("GetOrLoad = %q, %v", v, err)
		}
	}
	b.want(t, 1, events, users, event("miss"))
	b.want(t, 1, events, users, event("load"))
	b.want(t, 1, events, users, event("hit"), tier("server"))
	b.want(t, 0, events, users, event("hit"), tier("near"))
	b.want(t, 1, loads, users, result("ok"))

	if _, err := cache.GetOrLoad(ctx, c, "gone", func(context.Context) (string, error) { return "", loader.ErrNotFound }); !errors.Is(err, loader.ErrNotFound) {
		t.Fatalf("not found: %v", err)
	}
	boom := errors.New("boom")
	if _, err := cache.GetOrLoad(ctx, c, "bad", func(context.Context) (string, error) { return "", boom }); !errors.Is(err, boom) {
		t.Fatalf("failed load: %v", err)
	}
	b.want(t, 1, loads, users, result("not-found"))
	b.want(t, 1, loads, users, result("error"), errType("*errors.errorString")) // errors.New's type
	b.want(t, -1, loads, users, result("error"))

	if err := rdb.Set(ctx, ns+":{d}", "not an entry", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := cache.GetOrLoad(ctx, c, "d", metricstest.LoadString("D")); v != "D" || err != nil {
		t.Fatalf("GetOrLoad over a bad entry = %q, %v", v, err)
	}
	b.want(t, 1, events, users, event("decode-failure"))

	clk.Advance(2 * time.Minute)
	if v, err := cache.GetOrLoad(ctx, c, "a", metricstest.LoadString("A2")); v != "A" || err != nil {
		t.Fatalf("stale GetOrLoad = %q, %v; want the old value", v, err)
	}
	b.want(t, 1, events, users, event("stale"), tier("server"))
	b.waitFor(t, 3, loads, users, result("ok")) // a, d, and the refresh of a
	b.want(t, 1, events, users, event("refresh"))

	st := c.Stats()
	b.want(t, float64(st.Hits), events, users, event("hit"), tier("server"))
	b.want(t, float64(st.Misses), events, users, event("miss"))
	b.want(t, 0, "stampede.cache.near.entries", users)
	b.want(t, float64(st.Coalesced), "stampede.cache.coalesced", users)

	// One span per load, refresh included, each with its result; the
	// failed one in error, and its length the one the histogram got.
	spans := b.ended("stampede.cache.load")
	if len(spans) != 5 {
		t.Fatalf("%d load spans, want 5", len(spans))
	}
	failed := withResult(spans, "error")
	if len(failed) != 1 || failed[0].Status().Code != codes.Error || len(withResult(spans, "not-found")) != 1 || len(withResult(spans, "ok")) != 3 {
		t.Fatalf("load spans by result: ok %d, not-found %d, error %d (status %v); want 3, 1, 1 (Error)",
			len(withResult(spans, "ok")), len(withResult(spans, "not-found")), len(failed), failed[0].Status())
	}
	if et := attr(failed[0], "error.type"); et != "*errors.errorString" {
		t.Errorf("failed load span error.type %q, want *errors.errorString", et)
	}
	if nf := withResult(spans, "not-found")[0]; nf.Status().Code != codes.Unset || attr(nf, "error.type") != "" {
		t.Errorf("not-found load span status %v, error.type %q; want unset, none", nf.Status(), attr(nf, "error.type"))
	}
	_, sum := b.point(t, loads, users, result("error"), errType("*errors.errorString"))
	if d := failed[0].EndTime().Sub(failed[0].StartTime()); math.Abs(d.Seconds()-sum) > 1e-6 {
		t.Errorf("failed load span lasted %v, the histogram got %v s", d, sum)
	}
	for _, s := range spans {
		if attr(s, "stampede.key") != "" || attr(s, "stampede.cache") != "users" || s.Parent().IsValid() {
			t.Errorf("load span attributes %v, parent %v: want the cache's name, no key, no parent", s.Attributes(), s.Parent())
		}
	}
}

// Hits answered by the near cache are recorded in the near tier, the
// others in the server tier, as cache.Stats counts them; CacheStats
// reports the near cache's entries.
func TestCacheObserver_nearTier(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := metricstest.Context(t)
	b := newBed(t, nil)
	c, err := cache.New(s.NewClient(), &cache.Options{Namespace: redistest.Key(t, "ns"), Expiry: cache.ExpiryPolicy{Fresh: time.Minute},
		Near: &cache.Near{MaxEntries: 100}, Observer: b.tel.CacheObserver("near")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := b.tel.CacheStats("near", c); err != nil {
		t.Fatal(err)
	}
	metricstest.NearHit(t, ctx, c, "k")
	st := c.Stats()
	near := cacheAttr("near")
	b.want(t, float64(st.NearHits), "stampede.cache.events", near, event("hit"), tier("near"))
	if st.Hits > st.NearHits {
		b.want(t, float64(st.Hits-st.NearHits), "stampede.cache.events", near, event("hit"), tier("server"))
	}
	b.want(t, 1, "stampede.cache.near.entries", near)
	b.want(t, float64(st.NearInvalidations), "stampede.cache.near.invalidations", near)
	// A count of items that goes up and down: an up-down counter, whose
	// sums across caches mean something (a gauge's do not).
	m, _ := b.metric(t, "stampede.cache.near.entries")
	if sum, ok := m.Data.(metricdata.Sum[int64]); !ok || sum.IsMonotonic || m.Unit != "{entry}" {
		t.Errorf("near.entries is %T (monotonic %v) in %q; want an up-down counter (a non-monotonic sum) in {entry}", m.Data, ok && sum.IsMonotonic, m.Unit)
	}
}

// The meter's and the tracer's scope carry this module's name, a version
// and the schema URL of the semantic conventions followed.
func TestNew_scope(t *testing.T) {
	b := newBed(t, nil)
	b.tel.LockObserver("l")(lock.Event{Kind: lock.EventObtained, Context: context.Background()})
	_, ms := b.metric(t, "stampede.lock.obtain.duration")
	ts := only(t, "obtain", b.ended("stampede.lock.obtain")).InstrumentationScope()
	for _, sc := range []instrumentation.Scope{ms, ts} {
		if sc.Name != "github.com/hotkv/stampede/stampedeotel" || sc.Version == "" || sc.SchemaURL != semconv.SchemaURL {
			t.Errorf("scope %+v; want this module's, with a version and the schema %s", sc, semconv.SchemaURL)
		}
	}
}

// A caller of one Cache waits for the load of another and is woken with
// its value: a wait, timed and with a span, in the waiting Cache's name.
func TestCacheObserver_wait(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := metricstest.Context(t)
	bd := newBed(t, nil)
	metricstest.WaitForOthersLoad(t, ctx, s.NewClient, bd.tel.CacheObserver, bd.tel.CacheStats)
	const waits = "stampede.cache.wait.duration"
	bd.want(t, 1, waits, cacheAttr("b"), result("ok"))
	bd.want(t, 1, "stampede.cache.waits", cacheAttr("b"))
	bd.want(t, -1, waits, cacheAttr("a"), result("ok"))
	bd.want(t, 0, "stampede.cache.events", cacheAttr("b"), event("load"))
	bd.want(t, 1, "stampede.cache.events", cacheAttr("a"), event("load"))
	// a's load answered its caller, and b's waiter, which b counts.
	bd.want(t, 1, "stampede.cache.served", cacheAttr("b"))
	bd.want(t, 1, "stampede.cache.events", cacheAttr("a"), event("served"))
	bd.want(t, 0, "stampede.cache.events", cacheAttr("b"), event("served"))
	const callers = "stampede.cache.load.callers"
	if n, sum := bd.point(t, callers, cacheAttr("a")); n != 1 || sum != 1 {
		t.Errorf("%s of a: %v loads, %v callers; want 1 load that answered its 1 caller", callers, n, sum)
	}
	bd.want(t, -1, callers, cacheAttr("b"))
	spans := bd.ended("stampede.cache.wait")
	if len(spans) != 1 || attr(spans[0], "stampede.cache") != "b" || attr(spans[0], "stampede.result") != "ok" {
		t.Fatalf("wait spans %v, want one of b's, ok", spans)
	}
	_, sum := bd.point(t, waits, cacheAttr("b"), result("ok"))
	if d := spans[0].EndTime().Sub(spans[0].StartTime()); sum <= 0 || math.Abs(d.Seconds()-sum) > 1e-6 {
		t.Errorf("wait span lasted %v, the histogram got %v s", d, sum)
	}
}

// A held lock: a refused Obtain and one that waits until the holder
// releases, each timed with a span (carrying the key, with SpanKeys).
func TestLockObserver_contended(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := metricstest.Context(t)
	b := newBed(t, &stampedeotel.Options{SpanKeys: true})
	locks, err := lock.New(s.Client(t), &lock.Options{Observer: b.tel.LockObserver("jobs")})
	if err != nil {
		t.Fatal(err)
	}
	key := redistest.Key(t, "lock")
	c := metricstest.ContendLock(t, ctx, locks, key)
	jobs := lockAttr("jobs")
	const events, obtain = "stampede.lock.events", "stampede.lock.obtain.duration"
	b.want(t, 2, events, jobs, event("obtained"))
	b.want(t, 1, events, jobs, event("not-obtained"))
	b.want(t, 2, events, jobs, event("released"))
	b.want(t, 2, obtain, jobs, result("obtained"))
	b.want(t, 1, obtain, jobs, result("not-obtained"))
	b.want(t, 2, "stampede.lock.held.duration", jobs)

	spans := b.ended("stampede.lock.obtain")
	if len(spans) != 3 || len(withResult(spans, "obtained")) != 2 || len(withResult(spans, "not-obtained")) != 1 {
		t.Fatalf("%d obtain spans, want 2 obtained and 1 not-obtained", len(spans))
	}
	// The span of each call is placed by its end (when the Observer saw the
	// event) and its Duration, which is exact: only the waiter's ends after
	// the release, and it lasted at least from its first back-off to it.
	var after []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if attr(s, "stampede.key") != key || s.Status().Code != codes.Unset {
			t.Errorf("obtain span key %q status %v; want %q, unset", attr(s, "stampede.key"), s.Status(), key)
		}
		if s.EndTime().After(c.Released) {
			after = append(after, s)
		}
	}
	if len(after) != 1 || attr(after[0], "stampede.result") != "obtained" {
		t.Fatalf("%d obtain spans end after the release, want 1: the waiter's, obtained", len(after))
	}
	if d, least := after[0].EndTime().Sub(after[0].StartTime()), c.Released.Sub(c.Asked); d < least {
		t.Errorf("the waiter's obtain span lasted %v, less than the %v from its first back-off to the release", d, least)
	}
}

// A chi route behind the middleware: a MISS (with a render span), a HIT
// and a BYPASS, recorded by route pattern and reason, never by path; past
// MaxRoutes, paths are recorded as "other".
func TestMiddlewareObserver(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	b := newBed(t, &stampedeotel.Options{MaxRoutes: 1})
	mw := metricstest.NewMiddleware(t, s.Client(t), b.tel.MiddlewareObserver("pages"))
	r := chi.NewRouter()
	r.With(mw.Handler).Get("/users/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "user ", chi.URLParam(r, "id"))
	})
	r.With(mw.Handler).Get("/teams/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "team ", chi.URLParam(r, "id"))
	})
	srv := httptest.NewServer(r)
	defer srv.Close()
	for _, step := range []struct {
		path   string
		hdr    []string
		xcache string
	}{
		{"/users/1", nil, "MISS"},
		{"/users/1", nil, "HIT"},
		{"/users/2", []string{"Authorization", "Bearer x"}, "BYPASS"},
		{"/teams/1", nil, "MISS"}, // a second route, beyond MaxRoutes
	} {
		if got := metricstest.Get(t, srv, step.path, step.hdr...); got != step.xcache {
			t.Fatalf("%s: X-Cache %q, want %q", step.path, got, step.xcache)
		}
	}
	const events = "stampede.middleware.events"
	pages, users, get, ok := mwAttr("pages"), route("/users/{id}"), method("GET"), status(200)
	b.waitFor(t, 1, events, pages, users, get, ok, event("bypass"), reason("authorization"))
	b.waitFor(t, 1, events, pages, users, get, ok, event("miss"))
	b.waitFor(t, 1, events, pages, users, get, ok, event("hit"))
	b.waitFor(t, 1, events, pages, route("other"), get, ok, event("miss"))
	b.want(t, 1, "stampede.middleware.duration", pages, users, get, ok, event("hit"))
	spans := b.ended("stampede.middleware.render")
	if len(spans) != 2 || attr(spans[0], "http.route") != "/users/{id}" || attr(spans[1], "http.route") != "other" {
		t.Fatalf("render spans %v, want one for /users/{id} and one for other", spans)
	}
}

// Every kind a package defines is recorded under its String, also kinds
// this module was not written for.
func TestObservers_everyKind(t *testing.T) {
	b := newBed(t, nil)
	co, lo := b.tel.CacheObserver("c"), b.tel.LockObserver("l")
	n := 0
	for k := cache.EventKind(1); k.String() != "unknown"; k++ {
		co(cache.Event{Kind: k})
		kvs := []attribute.KeyValue{cacheAttr("c"), event(k.String())}
		if k == cache.EventHit || k == cache.EventStale {
			kvs = append(kvs, tier("server"))
		}
		b.want(t, 1, "stampede.cache.events", kvs...)
		n++
	}
	co(cache.Event{Kind: 250})
	b.want(t, 1, "stampede.cache.events", cacheAttr("c"), event("unknown"))
	for k := lock.EventKind(1); k.String() != "unknown"; k++ {
		lo(lock.Event{Kind: k})
		b.want(t, 1, "stampede.lock.events", lockAttr("l"), event(k.String()))
		n++
	}
	if n < 19 {
		t.Fatalf("%d kinds, want at least 19", n)
	}
	// Observers of one name add up.
	b.tel.CacheObserver("c")(cache.Event{Kind: cache.EventHit})
	b.want(t, 2, "stampede.cache.events", cacheAttr("c"), event("hit"), tier("server"))
}

func TestNew_invalid(t *testing.T) {
	tests := []struct {
		name string
		opts *stampedeotel.Options
	}{
		{"negative MaxRoutes", &stampedeotel.Options{MaxRoutes: -1}},
		{"buckets out of order", &stampedeotel.Options{Buckets: []float64{1, 0.5}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := stampedeotel.New(tt.opts); err == nil || !strings.HasPrefix(err.Error(), "stampedeotel: ") {
				t.Fatalf("New: %v, want a stampedeotel: error", err)
			}
		})
	}
}

func TestChain(t *testing.T) {
	var got []string
	f := func(s string) func(lock.Event) { return func(lock.Event) { got = append(got, s) } }
	if stampedeotel.Chain[lock.Event](nil) != nil {
		t.Error("Chain of nils is not nil")
	}
	stampedeotel.Chain(nil, f("a"), f("b"))(lock.Event{})
	if strings.Join(got, ",") != "a,b" {
		t.Errorf("called %v, want a,b", got)
	}
}
