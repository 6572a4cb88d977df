package stampedeotel

import (
	"context"
	"errors"
	"fmt"

	"github.com/hotkv/stampede/cache"
	"go.opentelemetry.io/otel/metric"
)

// CacheStats adds the counters of c.Stats that no cache.Event carries,
// read at every collection with the attribute stampede.cache=name:
// stampede.cache.coalesced, stampede.cache.waits,
// stampede.cache.lock_contention,
// stampede.cache.announce_denied, stampede.cache.near.invalidations,
// stampede.cache.near.flushes (observable counters) and
// stampede.cache.near.entries (an observable gauge). (Hits, misses,
// loads, fail-open loads, decode failures, refreshes, skipped writes and
// server errors come from CacheObserver's events.)
//
// stampede.cache.waits counts every wait for another process's load, as
// stampede.cache.wait.duration and the stampede.cache.wait spans do (one
// cache.EventWait per wait, however it ended).
//
// It returns an error if a Cache is already watched under name. c is read
// for as long as the Telemetry's meter collects, even after c.Close (Stats
// still works then).
func (t *Telemetry) CacheStats(name string, c *cache.Cache) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, dup := t.caches[name]; dup {
		return fmt.Errorf("stampedeotel: a Cache is already watched under the name %q", name)
	}
	t.caches[name] = c
	return nil
}

type statsInstruments struct {
	coalesced, waits, contention, announceDenied, nearInvalidations, nearFlushes metric.Int64ObservableCounter
	nearEntries                                                                  metric.Int64ObservableGauge
}

// newStats makes the observable instruments of CacheStats and registers
// the callback that reads the watched caches.
func (t *Telemetry) newStats(meter metric.Meter) (statsInstruments, error) {
	var s statsInstruments
	var errs []error
	counter := func(name, desc string) metric.Int64ObservableCounter {
		c, err := meter.Int64ObservableCounter(name, metric.WithUnit("{event}"), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	s.coalesced = counter("stampede.cache.coalesced", "Calls that joined a load or wait already running in this process (cache.Stats.Coalesced).")
	s.waits = counter("stampede.cache.waits", "Flights that waited for another process's load, however the wait ended (cache.Stats.Waits).")
	s.contention = counter("stampede.cache.lock_contention", "Rebuild locks found held by another process (cache.Stats.LockContention).")
	s.announceDenied = counter("stampede.cache.announce_denied",
		"SUBSCRIBEs and PUBLISHes of announcements the server refused; waiters poll instead (cache.Stats.AnnounceDenied).")
	s.nearInvalidations = counter("stampede.cache.near.invalidations", "Near-cache entries dropped because their key changed (cache.Stats.NearInvalidations).")
	s.nearFlushes = counter("stampede.cache.near.flushes", "Times the near cache was emptied: tracking lost, lapsed, or nodes changed (cache.Stats.NearFlushes).")
	g, err := meter.Int64ObservableGauge("stampede.cache.near.entries", metric.WithUnit("{entry}"),
		metric.WithDescription("Entries in the near cache now, otter's estimate (cache.Stats.NearEntries)."))
	errs = append(errs, err)
	s.nearEntries = g
	if err := errors.Join(errs...); err != nil {
		return s, err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t.observeStats(s, o)
		return nil
	}, s.coalesced, s.waits, s.contention, s.announceDenied, s.nearInvalidations, s.nearFlushes, s.nearEntries)
	return s, err
}

// observeStats observes the Stats of the watched caches.
func (t *Telemetry) observeStats(s statsInstruments, o metric.Observer) {
	t.mu.Lock()
	caches := make(map[string]*cache.Cache, len(t.caches))
	for name, c := range t.caches {
		caches[name] = c
	}
	t.mu.Unlock()
	for name, c := range caches {
		st := c.Stats()
		attrs := metric.WithAttributes(keyCache.String(name))
		o.ObserveInt64(s.coalesced, int64(st.Coalesced), attrs)
		o.ObserveInt64(s.waits, int64(st.Waits), attrs)
		o.ObserveInt64(s.contention, int64(st.LockContention), attrs)
		o.ObserveInt64(s.announceDenied, int64(st.AnnounceDenied), attrs)
		o.ObserveInt64(s.nearInvalidations, int64(st.NearInvalidations), attrs)
		o.ObserveInt64(s.nearFlushes, int64(st.NearFlushes), attrs)
		o.ObserveInt64(s.nearEntries, int64(st.NearEntries), attrs)
	}
}
