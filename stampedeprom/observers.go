package stampedeprom

import (
	"math"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/lock"
	"github.com/hotkv/stampede/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// CacheObserver returns a function for cache.Options.Observer that counts
// the Cache's Events under the label cache=name: every Event in
// stampede_cache_events_total by its kind (and, for hits and stale hits,
// its tier: near or server), the loader's run time in
// stampede_cache_load_duration_seconds, the wait for another process's
// load in stampede_cache_wait_duration_seconds, and the calls of this
// process each load answered (cache.EventServed's Callers) in
// stampede_cache_load_callers.
//
// Every series it uses exists (at 0) from now on, and counting allocates
// nothing: events are counted in place (hits and stale hits in counters
// striped over cache lines) and read when the Metrics are collected. Each
// Cache should have its own name; Caches that share a name add up. The
// function is safe for concurrent use.
func (m *Metrics) CacheObserver(name string) func(cache.Event) {
	m.mu.Lock()
	events := m.tables[name]
	if events == nil {
		events = metrics.NewEvents(cache.EventHit, cache.EventStale)
		m.tables[name] = events
	}
	m.mu.Unlock()
	loads := resolve(m.cacheLoads, name, metrics.LoadResults()...)
	waits := resolve(m.cacheWaits, name, metrics.WaitResults()...)
	callers := m.cacheCallers.WithLabelValues(name)
	return func(e cache.Event) {
		events.Count(e.Kind, e.Near)
		switch e.Kind {
		case cache.EventLoad:
			loads[metrics.LoadResult(e.Err)].Observe(e.Duration.Seconds())
		case cache.EventWait:
			waits[metrics.WaitResult(e.Err)].Observe(e.Duration.Seconds())
		case cache.EventServed:
			callers.Observe(float64(e.Callers))
		}
	}
}

// LockObserver returns a function for lock.Options.Observer that counts the
// lock Client's Events under the label lock=name: every Event in
// stampede_lock_events_total by its kind, the time each Obtain took
// (retries and waiting included) in stampede_lock_obtain_duration_seconds
// by result, and how long each released lock was held in
// stampede_lock_held_duration_seconds.
//
// Every series it uses is created (at 0) now, so that counting allocates
// nothing. The function is safe for concurrent use.
func (m *Metrics) LockObserver(name string) func(lock.Event) {
	events := new([math.MaxUint8 + 1]prometheus.Counter) // by kind, a uint8
	for k := 1; k <= math.MaxUint8; k++ {
		if s := lock.EventKind(k).String(); s != "unknown" {
			events[k] = m.lockEvents.WithLabelValues(name, s)
		}
	}
	obtain := resolve(m.lockObtain, name, lock.EventObtained.String(), lock.EventNotObtained.String(), lock.EventObtainFailed.String())
	held := m.lockHeld.WithLabelValues(name)
	return func(e lock.Event) {
		if c := events[e.Kind]; c != nil {
			c.Inc()
		} else {
			m.lockEvents.WithLabelValues(name, e.Kind.String()).Inc()
		}
		switch e.Kind {
		case lock.EventObtained:
			obtain[0].Observe(e.Duration.Seconds())
		case lock.EventNotObtained:
			obtain[1].Observe(e.Duration.Seconds())
		case lock.EventObtainFailed:
			obtain[2].Observe(e.Duration.Seconds())
		case lock.EventReleased:
			held.Observe(e.Duration.Seconds())
		}
	}
}

// resolve returns the series of v for the label values name and each of
// results.
func resolve(v *prometheus.HistogramVec, name string, results ...string) []prometheus.Observer {
	obs := make([]prometheus.Observer, len(results))
	for i, r := range results {
		obs[i] = v.WithLabelValues(name, r)
	}
	return obs
}
