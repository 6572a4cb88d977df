package stampedeprom

import (
	"fmt"

	"github.com/hotkv/stampede/cache"
	"github.com/prometheus/client_golang/prometheus"
)

// CacheStats adds the counters of c.Stats that no cache.Event carries to
// the Metrics, read at every scrape under the label cache=name:
// stampede_cache_coalesced_total, stampede_cache_waits_total,
// stampede_cache_lock_contention_total,
// stampede_cache_announce_denied_total,
// stampede_cache_near_invalidations_total,
// stampede_cache_near_flushes_total and the gauge
// stampede_cache_near_entries. (Hits, misses, loads, fail-open loads,
// decode failures, refreshes, skipped writes and server errors come from
// CacheObserver's events.)
//
// stampede_cache_waits_total counts every wait for another process's
// load, as stampede_cache_wait_duration_seconds does (one cache.EventWait
// per wait, however it ended).
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

// statsDescs describes the metrics read from cache.Stats.
type statsDescs struct {
	coalesced, waits, contention, announceDenied, nearInvalidations, nearFlushes, nearEntries *prometheus.Desc
}

func newStatsDescs(ns string) statsDescs {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(ns, "cache", name), help, []string{"cache"}, nil)
	}
	return statsDescs{
		coalesced:         desc("coalesced_total", "Calls that joined a load or wait already running in this process (cache.Stats.Coalesced)."),
		waits:             desc("waits_total", "Flights that waited for another process's load, however the wait ended (cache.Stats.Waits)."),
		contention:        desc("lock_contention_total", "Rebuild locks found held by another process (cache.Stats.LockContention)."),
		announceDenied:    desc("announce_denied_total", "SUBSCRIBEs and PUBLISHes of announcements the server refused; waiters poll instead (cache.Stats.AnnounceDenied)."),
		nearInvalidations: desc("near_invalidations_total", "Near-cache entries dropped because their key changed (cache.Stats.NearInvalidations)."),
		nearFlushes:       desc("near_flushes_total", "Times the near cache was emptied: tracking lost, lapsed, or nodes changed (cache.Stats.NearFlushes)."),
		nearEntries:       desc("near_entries", "Entries in the near cache now, otter's estimate (cache.Stats.NearEntries)."),
	}
}

func (d statsDescs) describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.coalesced, d.waits, d.contention, d.announceDenied, d.nearInvalidations, d.nearFlushes, d.nearEntries} {
		ch <- x
	}
}

func (d statsDescs) collect(ch chan<- prometheus.Metric, name string, s cache.Stats) {
	counter := func(desc *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), name)
	}
	counter(d.coalesced, s.Coalesced)
	counter(d.waits, s.Waits)
	counter(d.contention, s.LockContention)
	counter(d.announceDenied, s.AnnounceDenied)
	counter(d.nearInvalidations, s.NearInvalidations)
	counter(d.nearFlushes, s.NearFlushes)
	ch <- prometheus.MustNewConstMetric(d.nearEntries, prometheus.GaugeValue, float64(s.NearEntries), name)
}
