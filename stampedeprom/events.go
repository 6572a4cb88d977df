package stampedeprom

import (
	"github.com/hotkv/stampede/internal/obs"
	"github.com/prometheus/client_golang/prometheus"
)

// collectEvents sends the series of tb, the events of the CacheObservers
// named name, for stampede_cache_events_total: every kind that exists
// (zeros included), and the unknown kinds once counted.
func collectEvents(ch chan<- prometheus.Metric, desc *prometheus.Desc, name string, tb *obs.Events) {
	tb.Each(func(k int, tier obs.Tier, n uint64) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(n), name, tb.Name(k), tier.String())
	})
}
