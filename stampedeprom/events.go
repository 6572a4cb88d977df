package stampedeprom

import (
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// collectEvents sends the series of tb, the events of the CacheObservers
// named name, for stampede_cache_events_total: every kind that exists
// (zeros included), and the unknown kinds once counted.
func collectEvents(ch chan<- prometheus.Metric, desc *prometheus.Desc, name string, tb *metrics.Events[cache.EventKind]) {
	tb.Each(func(k cache.EventKind, tier metrics.Tier, n uint64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(n), name, k.String(), tier.String())
	})
}
