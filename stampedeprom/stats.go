package stampedeprom

import (
	"fmt"
	"strings"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// CacheStats adds the counters of c.Stats that no cache.Event carries to
// the Metrics, read at every scrape under the label cache=name:
// stampede_cache_coalesced_total, stampede_cache_served_total,
// stampede_cache_waits_total,
// stampede_cache_lock_contention_total,
// stampede_cache_announce_denied_total,
// stampede_cache_near_invalidations_total,
// stampede_cache_near_flushes_total, the gauge
// stampede_cache_near_entries and stampede_cache_backend_waits_total. (Hits, misses, loads, fail-open loads,
// decode failures, refreshes, skipped writes and server errors come from
// CacheObserver's events.)
//
// stampede_cache_waits_total counts every wait for another process's
// load, as stampede_cache_wait_duration_seconds does (one cache.EventWait
// per wait, however it ended).
//
// stampede_cache_served_total counts the calls a load answered, each in
// its own process (cache.Stats.Served): summed over the processes and
// divided by the loads, sum(stampede_cache_served_total) /
// sum(stampede_cache_events_total{event="load"}), it is the fleet's
// callers per load.
//
// It returns an error if a Cache is already watched under name. c is read
// until the Metrics are dropped, even after c.Close (Stats still works
// then).
func (m *Metrics) CacheStats(name string, c *cache.Cache) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.caches[name]; dup {
		return fmt.Errorf("stampedeprom: a Cache is already watched under the name %q", name)
	}
	m.caches[name] = c
	return nil
}

// statsDescs describes the metrics read from cache.Stats, one for each
// of metrics.StatsFields.
type statsDescs struct {
	fields []metrics.StatsField
	descs  []*prometheus.Desc
}

func newStatsDescs(ns string) statsDescs {
	d := statsDescs{fields: metrics.StatsFields()}
	for _, f := range d.fields {
		name := strings.ReplaceAll(f.Name, ".", "_")
		if !f.Gauge {
			name += "_total"
		}
		d.descs = append(d.descs, prometheus.NewDesc(prometheus.BuildFQName(ns, "cache", name), f.Help, []string{"cache"}, nil))
	}
	return d
}

func (d statsDescs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range d.descs {
		ch <- x
	}
}

func (d statsDescs) collect(ch chan<- prometheus.Metric, name string, s cache.Stats) {
	for i, f := range d.fields {
		t := prometheus.CounterValue
		if f.Gauge {
			t = prometheus.GaugeValue
		}
		ch <- prometheus.MustNewConstMetric(d.descs[i], t, float64(f.Value(s)), name)
	}
}
