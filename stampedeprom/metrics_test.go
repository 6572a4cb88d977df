package stampedeprom_test

import (
	"context"
	"errors"
	"fmt"
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
	"github.com/hotkv/stampede/stampedeprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// newMetrics returns Metrics registered with a registry of their own.
func newMetrics(tb testing.TB, opts *stampedeprom.Options) (*stampedeprom.Metrics, *prometheus.Registry) {
	tb.Helper()
	reg := prometheus.NewRegistry()
	m, err := stampedeprom.New(reg, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return m, reg
}

// series returns the series of the metric name whose labels are exactly
// labels (name, value pairs; an empty value matches a missing label), or
// nil.
func series(tb testing.TB, g prometheus.Gatherer, name string, labels ...string) *dto.Metric {
	tb.Helper()
	mfs, err := g.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue metrics
				}
				delete(have, labels[i])
			}
			for _, v := range have {
				if v != "" {
					continue metrics
				}
			}
			return m
		}
	}
	return nil
}

// value returns the value of a counter or gauge series, or the sample
// count of a histogram series; -1 when there is no such series.
func value(tb testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	tb.Helper()
	m := series(tb, g, name, labels...)
	switch {
	case m == nil:
		return -1
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	tb.Fatalf("%s: unexpected metric type", name)
	return 0
}

// want fails tb unless the metric's value (see value) is v.
func want(tb testing.TB, g prometheus.Gatherer, v float64, name string, labels ...string) {
	tb.Helper()
	if got := value(tb, g, name, labels...); got != v {
		tb.Errorf("%s%v = %v, want %v", name, labels, got, v)
	}
}

// waitValue waits until the metric's value (see value) is v: events of
// background work (refreshes, the middleware's events after the response)
// come after the call that caused them has returned.
func waitValue(tb testing.TB, g prometheus.Gatherer, v float64, name string, labels ...string) {
	tb.Helper()
	redistest.WaitFor(tb, metricstest.Context(tb), fmt.Sprintf("%s%v = %v", name, labels, v), func() bool {
		return value(tb, g, name, labels...) == v
	})
}

// A miss and its load, a hit, a not-found, a failed load, an entry that
// does not decode and a stale hit with its refresh, each counted by kind
// on Redis 8, and the hits, stale hits and misses equal to the cache's own
// Stats.
func TestCacheObserver(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := metricstest.Context(t)
	m, reg := newMetrics(t, nil)
	clk := &metricstest.Clock{}
	ns := redistest.Key(t, "ns")
	rdb := s.Client(t)
	c, err := cache.New(rdb, &cache.Options{Namespace: ns, Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute},
		Now: clk.Now, Observer: m.CacheObserver("users")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := m.CacheStats("users", c); err != nil {
		t.Fatal(err)
	}
	const events = "stampede_cache_events_total"
	const loads = "stampede_cache_load_duration_seconds"

	for range 2 { // a miss and a load, then a hit
		if v, err := cache.GetOrLoad(ctx, c, "a", metricstest.LoadString("A")); v != "A" || err != nil {
			t.Fatalf("GetOrLoad = %q, %v", v, err)
		}
	}
	want(t, reg, 1, events, "cache", "users", "event", "miss")
	want(t, reg, 1, events, "cache", "users", "event", "load")
	want(t, reg, 1, events, "cache", "users", "event", "hit", "tier", "server")
	want(t, reg, 0, events, "cache", "users", "event", "hit", "tier", "near")
	want(t, reg, 1, loads, "cache", "users", "result", "ok")

	_, err = cache.GetOrLoad(ctx, c, "gone", func(context.Context) (string, error) { return "", loader.ErrNotFound })
	if !errors.Is(err, loader.ErrNotFound) {
		t.Fatalf("not found: %v", err)
	}
	boom := errors.New("boom")
	if _, err = cache.GetOrLoad(ctx, c, "bad", func(context.Context) (string, error) { return "", boom }); !errors.Is(err, boom) {
		t.Fatalf("failed load: %v", err)
	}
	want(t, reg, 1, loads, "cache", "users", "result", "not-found")
	want(t, reg, 1, loads, "cache", "users", "result", "error")
	want(t, reg, 3, events, "cache", "users", "event", "load")

	// An entry written by something else, that does not decode: replaced.
	if err := rdb.Set(ctx, ns+":{d}", "not an entry", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := cache.GetOrLoad(ctx, c, "d", metricstest.LoadString("D")); v != "D" || err != nil {
		t.Fatalf("GetOrLoad over a bad entry = %q, %v", v, err)
	}
	want(t, reg, 1, events, "cache", "users", "event", "decode-failure")

	// Past the TTL, within Expiry.Stale: a stale hit, refreshed in the background.
	clk.Advance(2 * time.Minute)
	if v, err := cache.GetOrLoad(ctx, c, "a", metricstest.LoadString("A2")); v != "A" || err != nil {
		t.Fatalf("stale GetOrLoad = %q, %v; want the old value", v, err)
	}
	want(t, reg, 1, events, "cache", "users", "event", "stale", "tier", "server")
	waitValue(t, reg, 3, loads, "cache", "users", "result", "ok") // a, d, and the refresh of a
	want(t, reg, 1, events, "cache", "users", "event", "refresh")

	st := c.Stats()
	want(t, reg, float64(st.Hits), events, "cache", "users", "event", "hit", "tier", "server")
	want(t, reg, float64(st.StaleHits), events, "cache", "users", "event", "stale", "tier", "server")
	want(t, reg, float64(st.Misses), events, "cache", "users", "event", "miss")
	want(t, reg, float64(st.DecodeFailures), events, "cache", "users", "event", "decode-failure")
	want(t, reg, 0, "stampede_cache_near_entries", "cache", "users")
	if err := m.CacheStats("users", c); err == nil {
		t.Error("a second CacheStats under one name: no error")
	}
}

// Hits answered by the near cache count in the near tier, the others in
// the server tier, as cache.Stats counts them; CacheStats reports the near
// cache's entries.
func TestCacheObserver_nearTier(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := metricstest.Context(t)
	m, reg := newMetrics(t, nil)
	c, err := cache.New(s.NewClient(), &cache.Options{Namespace: redistest.Key(t, "ns"), Expiry: cache.ExpiryPolicy{Fresh: time.Minute},
		Near: &cache.Near{MaxEntries: 100}, Observer: m.CacheObserver("near")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := m.CacheStats("near", c); err != nil {
		t.Fatal(err)
	}
	metricstest.NearHit(t, ctx, c, "k")
	st := c.Stats()
	want(t, reg, float64(st.NearHits), "stampede_cache_events_total", "cache", "near", "event", "hit", "tier", "near")
	want(t, reg, float64(st.Hits-st.NearHits), "stampede_cache_events_total", "cache", "near", "event", "hit", "tier", "server")
	want(t, reg, float64(st.NearEntries), "stampede_cache_near_entries", "cache", "near")
	if st.NearEntries != 1 {
		t.Errorf("NearEntries = %d, want 1", st.NearEntries)
	}
	want(t, reg, float64(st.NearInvalidations), "stampede_cache_near_invalidations_total", "cache", "near")
}

// A caller of one Cache waits for the load of another (another process,
// as far as the server can tell) and is woken with its value: a wait,
// timed, in the waiting Cache's metrics only.
func TestCacheObserver_wait(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := metricstest.Context(t)
	m, reg := newMetrics(t, nil)
	metricstest.WaitForOthersLoad(t, ctx, s.NewClient, m.CacheObserver, m.CacheStats)
	const waits = "stampede_cache_wait_duration_seconds"
	want(t, reg, 1, waits, "cache", "b", "result", "ok")
	want(t, reg, 1, "stampede_cache_waits_total", "cache", "b")
	want(t, reg, 0, waits, "cache", "a", "result", "ok")
	want(t, reg, 1, "stampede_cache_events_total", "cache", "b", "event", "wait")
	want(t, reg, 0, "stampede_cache_events_total", "cache", "b", "event", "load")
	want(t, reg, 1, "stampede_cache_events_total", "cache", "a", "event", "load")
	if h := series(t, reg, waits, "cache", "b", "result", "ok").GetHistogram(); h.GetSampleSum() <= 0 {
		t.Errorf("wait duration sum %v, want > 0", h.GetSampleSum())
	}
	// a's load answered its caller, and b's waiter, which b counts.
	want(t, reg, 1, "stampede_cache_served_total", "cache", "b")
	want(t, reg, 1, "stampede_cache_events_total", "cache", "a", "event", "served")
	want(t, reg, 0, "stampede_cache_events_total", "cache", "b", "event", "served")
	const callers = "stampede_cache_load_callers"
	want(t, reg, 1, callers, "cache", "a") // reported before a's caller returned
	if h := series(t, reg, callers, "cache", "a").GetHistogram(); h.GetSampleSum() != 1 {
		t.Errorf("load callers sum %v, want 1: the caller that ran the load", h.GetSampleSum())
	}
	want(t, reg, 0, callers, "cache", "b")
}

// A held lock: a refused Obtain, an Obtain that waits until the holder
// releases, each timed; the releases time how long the lock was held.
func TestLockObserver_contended(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := metricstest.Context(t)
	m, reg := newMetrics(t, nil)
	locks, err := lock.New(s.Client(t), &lock.Options{Observer: m.LockObserver("jobs")})
	if err != nil {
		t.Fatal(err)
	}
	key := redistest.Key(t, "lock")
	metricstest.ContendLock(t, ctx, locks, key)
	const events, obtain = "stampede_lock_events_total", "stampede_lock_obtain_duration_seconds"
	want(t, reg, 2, events, "lock", "jobs", "event", "obtained")
	want(t, reg, 1, events, "lock", "jobs", "event", "not-obtained")
	want(t, reg, 2, events, "lock", "jobs", "event", "released")
	want(t, reg, 0, events, "lock", "jobs", "event", "lost")
	want(t, reg, 2, obtain, "lock", "jobs", "result", "obtained")
	want(t, reg, 1, obtain, "lock", "jobs", "result", "not-obtained")
	want(t, reg, 2, "stampede_lock_held_duration_seconds", "lock", "jobs")
	if h := series(t, reg, obtain, "lock", "jobs", "result", "obtained").GetHistogram(); h.GetSampleSum() <= 0 {
		t.Errorf("obtain duration sum %v s, want > 0", h.GetSampleSum())
	}
}

// A chi route behind the middleware: a MISS, a HIT and a BYPASS, labelled
// with the route's pattern and the bypass's reason, never the path.
func TestMiddlewareObserver(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	m, reg := newMetrics(t, nil)
	mw := metricstest.NewMiddleware(t, s.Client(t), m.MiddlewareObserver("pages"))
	r := chi.NewRouter()
	r.With(mw.Handler).Get("/users/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "user ", chi.URLParam(r, "id"))
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
	} {
		if got := metricstest.Get(t, srv, step.path, step.hdr...); got != step.xcache {
			t.Fatalf("%s: X-Cache %q, want %q", step.path, got, step.xcache)
		}
	}
	const events = "stampede_middleware_events_total"
	route := []string{"middleware", "pages", "route", "/users/{id}"}
	// Events come after the response.
	waitValue(t, reg, 1, events, append(route, "event", "bypass", "reason", "authorization")...)
	waitValue(t, reg, 1, events, append(route, "event", "miss")...)
	waitValue(t, reg, 1, events, append(route, "event", "hit")...)
	want(t, reg, 1, "stampede_middleware_duration_seconds", append(route, "event", "hit")...)
	want(t, reg, 1, "stampede_middleware_duration_seconds", append(route, "event", "miss")...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				if strings.Contains(lp.GetValue(), "/users/1") || strings.Contains(lp.GetValue(), "/users/2") {
					t.Errorf("%s has a path in label %s=%q", mf.GetName(), lp.GetName(), lp.GetValue())
				}
			}
		}
	}
}

// The route label is the route's pattern (here net/http's ServeMux
// patterns): beyond MaxRoutes distinct routes, events count under "other".
func TestMiddlewareObserver_maxRoutes(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	m, reg := newMetrics(t, &stampedeprom.Options{MaxRoutes: 2})
	mw := metricstest.NewMiddleware(t, s.Client(t), m.MiddlewareObserver("pages"))
	mux := http.NewServeMux()
	for _, p := range []string{"/a", "/b", "/c", "/d"} {
		mux.Handle("GET "+p, mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, r.URL.Path)
		})))
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, p := range []string{"/a", "/b", "/c", "/d", "/a"} {
		metricstest.Get(t, srv, p)
	}
	const events = "stampede_middleware_events_total"
	waitValue(t, reg, 2, events, "middleware", "pages", "route", "other", "event", "miss")
	waitValue(t, reg, 1, events, "middleware", "pages", "route", "/a", "event", "hit")
	want(t, reg, 1, events, "middleware", "pages", "route", "/a", "event", "miss")
	want(t, reg, 1, events, "middleware", "pages", "route", "/b", "event", "miss")
	want(t, reg, -1, events, "middleware", "pages", "route", "/c", "event", "miss")
}

// Every kind a package defines is counted under its String, also kinds
// this module was not written for; the Metrics' whole output is valid.
func TestObservers_everyKind(t *testing.T) {
	m, reg := newMetrics(t, &stampedeprom.Options{Namespace: "app"})
	co, lo := m.CacheObserver("c"), m.LockObserver("l")
	var ck []cache.EventKind
	for k := cache.EventKind(1); k.String() != "unknown"; k++ {
		ck = append(ck, k)
		co(cache.Event{Kind: k})
	}
	var lk []lock.EventKind
	for k := lock.EventKind(1); k.String() != "unknown"; k++ {
		lk = append(lk, k)
		lo(lock.Event{Kind: k})
	}
	if len(ck) < 10 || len(lk) < 9 {
		t.Fatalf("%d cache kinds, %d lock kinds", len(ck), len(lk))
	}
	co(cache.Event{Kind: 250}) // out of range: "unknown"
	for _, k := range ck {
		labels := []string{"cache", "c", "event", k.String()}
		if k == cache.EventHit || k == cache.EventStale {
			labels = append(labels, "tier", "server")
		}
		want(t, reg, 1, "app_cache_events_total", labels...)
	}
	want(t, reg, 1, "app_cache_events_total", "cache", "c", "event", "unknown")
	for _, k := range lk {
		want(t, reg, 1, "app_lock_events_total", "lock", "l", "event", k.String())
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
	// Observers of one name add up.
	m.CacheObserver("c")(cache.Event{Kind: cache.EventHit})
	want(t, reg, 2, "app_cache_events_total", "cache", "c", "event", "hit", "tier", "server")
}

func TestNew_invalid(t *testing.T) {
	tests := []struct {
		name string
		opts *stampedeprom.Options
	}{
		{"negative MaxRoutes", &stampedeprom.Options{MaxRoutes: -1}},
		{"buckets out of order", &stampedeprom.Options{Buckets: []float64{1, 0.5}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := stampedeprom.New(nil, tt.opts); err == nil || !strings.HasPrefix(err.Error(), "stampedeprom: ") {
				t.Fatalf("New: %v, want a stampedeprom: error", err)
			}
		})
	}
	reg := prometheus.NewRegistry()
	if _, err := stampedeprom.New(reg, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := stampedeprom.New(reg, nil); err == nil {
		t.Error("a second New on one registry with one Namespace: no error")
	}
}

func TestChain(t *testing.T) {
	var got []string
	f := func(s string) func(cache.Event) { return func(cache.Event) { got = append(got, s) } }
	if stampedeprom.Chain[cache.Event](nil, nil) != nil {
		t.Error("Chain of nils is not nil")
	}
	stampedeprom.Chain(f("a"), nil, f("b"))(cache.Event{})
	if strings.Join(got, ",") != "a,b" {
		t.Errorf("called %v, want a,b", got)
	}
}
