package stampedeprom

import (
	"fmt"
	"sync"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configures New. A nil *Options means all defaults.
type Options struct {
	// Namespace is the first part of every metric name, as in
	// "stampede_cache_events_total". Default: "stampede".
	Namespace string
	// Buckets are the upper bounds, in seconds, of the duration
	// histograms' buckets, in increasing order. Default: 0.5 ms, 1 ms,
	// 2.5 ms, 5 ms, ... 10 s (14 buckets), for loads that take from a
	// lookup's time to a slow query's.
	Buckets []float64
	// MaxRoutes bounds the distinct values of the route label of each
	// MiddlewareObserver: events of routes first seen after this many are
	// counted under the route "other". Default: 100.
	MaxRoutes int
}

func (o *Options) namespace() string {
	if o == nil || o.Namespace == "" {
		return "stampede"
	}
	return o.Namespace
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

func (o *Options) validate() error {
	if o == nil {
		return nil
	}
	if err := metrics.Validate(o.Buckets, o.MaxRoutes); err != nil {
		return fmt.Errorf("stampedeprom: %w", err)
	}
	return nil
}

// Metrics holds the metrics of the caches, locks and middlewares whose
// Observers it made. It is a prometheus.Collector. Its methods are safe
// for concurrent use. Use New to create one.
type Metrics struct {
	maxRoutes int

	cacheEvents  *prometheus.Desc         // cache, event, tier; collected from tables
	cacheLoads   *prometheus.HistogramVec // cache, result
	cacheWaits   *prometheus.HistogramVec // cache, result
	cacheCallers *prometheus.HistogramVec // cache
	lockEvents   *prometheus.CounterVec   // lock, event
	lockObtain   *prometheus.HistogramVec // lock, result
	lockHeld     *prometheus.HistogramVec // lock
	httpEvents   *prometheus.CounterVec   // middleware, route, event, reason
	httpDuration *prometheus.HistogramVec // middleware, route, event

	stats statsDescs

	mu     sync.Mutex // guards caches and tables
	caches map[string]*cache.Cache
	tables map[string]*metrics.Events[cache.EventKind] // by the name given to CacheObserver
}

// New returns Metrics whose names start with Options.Namespace, registered
// with reg. A nil reg registers nothing: register the Metrics (a
// prometheus.Collector) yourself, or Collect them in tests. New fails if
// Options are invalid or reg refuses the metrics (e.g. a second Metrics of
// the same Namespace).
func New(reg prometheus.Registerer, opts *Options) (*Metrics, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	ns, buckets := opts.namespace(), opts.buckets()
	counter := func(sub, name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, labels)
	}
	histogram := func(sub, name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help, Buckets: buckets}, labels)
	}
	m := &Metrics{
		maxRoutes: opts.maxRoutes(),
		cacheEvents: prometheus.NewDesc(prometheus.BuildFQName(ns, "cache", "events_total"),
			"Events of a cache.Cache by kind, the EventKind's String (hit, stale, miss, load, wait, fail-open, ...); tier is near or server for hits and stale hits.",
			[]string{"cache", "event", "tier"}, nil),
		cacheLoads: histogram("cache", "load_duration_seconds",
			"How long the loader ran, by result (ok, not-found, error).", "cache", "result"),
		cacheWaits: histogram("cache", "wait_duration_seconds",
			"How long a call waited for another process's load until it was woken with the outcome, by result (ok, timeout, error).", "cache", "result"),
		cacheCallers: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: "cache", Name: "load_callers",
			Help:    "Calls of this process that one load answered (cache.Event.Callers): the one that ran it and those that joined it; for a background refresh, the stale values served meanwhile. Waiters in other processes count in their own stampede_cache_served_total.",
			Buckets: metrics.CallerBuckets()}, []string{"cache"}),
		lockEvents: counter("lock", "events_total",
			"Events of a lock.Client by kind, the EventKind's String (obtained, not-obtained, released, lost, woken, ...).",
			"lock", "event"),
		lockObtain: histogram("lock", "obtain_duration_seconds",
			"How long Obtain took, retries and waiting included, by result (obtained, not-obtained, obtain-failed).", "lock", "result"),
		lockHeld: histogram("lock", "held_duration_seconds",
			"How long a lock was held until Release.", "lock"),
		httpEvents: counter("middleware", "events_total",
			"Requests the middleware answered by kind (hit, stale, miss, bypass, canceled) and renders it finished in the background (background), by route and reason.",
			"middleware", "route", "event", "reason"),
		httpDuration: histogram("middleware", "duration_seconds",
			"How long the middleware took to answer a request, render or wait included; for background, how long the render took.",
			"middleware", "route", "event"),
		stats:  newStatsDescs(ns),
		caches: map[string]*cache.Cache{},
		tables: map[string]*metrics.Events[cache.EventKind]{},
	}
	if reg != nil {
		if err := reg.Register(m); err != nil {
			return nil, fmt.Errorf("stampedeprom: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) vecs() []prometheus.Collector {
	return []prometheus.Collector{m.cacheLoads, m.cacheWaits, m.cacheCallers, m.lockEvents, m.lockObtain, m.lockHeld, m.httpEvents, m.httpDuration}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, v := range m.vecs() {
		v.Describe(ch)
	}
	ch <- m.cacheEvents
	m.stats.describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, v := range m.vecs() {
		v.Collect(ch)
	}
	m.mu.Lock()
	caches := make(map[string]*cache.Cache, len(m.caches))
	for name, c := range m.caches {
		caches[name] = c
	}
	tables := make(map[string]*metrics.Events[cache.EventKind], len(m.tables))
	for name, tb := range m.tables {
		tables[name] = tb
	}
	m.mu.Unlock()
	for name, tb := range tables {
		collectEvents(ch, m.cacheEvents, name, tb)
	}
	for name, c := range caches {
		m.stats.collect(ch, name, c.Stats())
	}
}

// Chain returns an Observer that calls each non-nil observer in turn, for
// an Options.Observer of package cache, lock or middleware that must feed
// more than one consumer: Chain(existing, m.CacheObserver("users")). It
// returns nil when all are nil.
func Chain[E any](observers ...func(E)) func(E) { return metrics.Chain(observers...) }
