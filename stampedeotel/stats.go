package stampedeotel

import (
	"context"
	"errors"
	"fmt"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/metrics"
	"go.opentelemetry.io/otel/metric"
)

// CacheStats adds the counters of c.Stats that no cache.Event carries,
// read at every collection with the attribute stampede.cache=name:
// stampede.cache.coalesced, stampede.cache.served, stampede.cache.waits,
// stampede.cache.lock_contention,
// stampede.cache.announce_denied, stampede.cache.near.invalidations,
// stampede.cache.near.flushes (observable counters) and
// stampede.cache.near.entries (an observable up-down counter, unit
// {entry}: a count of items, which goes down as well as up) and
// stampede.cache.backend_waits. (Hits, misses,
// loads, fail-open loads, decode failures, refreshes, skipped writes and
// server errors come from CacheObserver's events.)
//
// stampede.cache.waits counts every wait for another process's load, as
// stampede.cache.wait.duration and the stampede.cache.wait spans do (one
// cache.EventWait per wait, however it ended).
//
// stampede.cache.served counts the calls a load answered, each in its own
// process (cache.Stats.Served): summed over the processes and divided by
// the loads (stampede.cache.events with stampede.event=load), it is the
// fleet's callers per load.
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

// newStats makes the observable instruments of CacheStats, one for each
// of metrics.StatsFields, and registers the callback that reads the watched
// caches.
func (t *Telemetry) newStats(meter metric.Meter) error {
	fields := metrics.StatsFields()
	insts := make([]metric.Int64Observable, len(fields))
	all := make([]metric.Observable, len(fields))
	var errs []error
	for i, f := range fields {
		var err error
		name, desc := "stampede.cache."+f.Name, metric.WithDescription(f.Help)
		if f.Gauge {
			// A count of items that goes up and down: an UpDownCounter, as
			// the semantic conventions advise (a sum of several caches'
			// is meaningful; a gauge's is not).
			insts[i], err = meter.Int64ObservableUpDownCounter(name, metric.WithUnit("{entry}"), desc)
		} else {
			insts[i], err = meter.Int64ObservableCounter(name, metric.WithUnit("{event}"), desc)
		}
		errs = append(errs, err)
		all[i] = insts[i]
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	_, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t.observeStats(fields, insts, o)
		return nil
	}, all...)
	return err
}

// observeStats observes the Stats of the watched caches into insts, the
// instruments of fields.
func (t *Telemetry) observeStats(fields []metrics.StatsField, insts []metric.Int64Observable, o metric.Observer) {
	t.mu.Lock()
	caches := make(map[string]*cache.Cache, len(t.caches))
	for name, c := range t.caches {
		caches[name] = c
	}
	t.mu.Unlock()
	for name, c := range caches {
		st := c.Stats()
		attrs := metric.WithAttributes(keyCache.String(name))
		for i, f := range fields {
			o.ObserveInt64(insts[i], int64(f.Value(st)), attrs)
		}
	}
}
