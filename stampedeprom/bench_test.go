package stampedeprom_test

import (
	"testing"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/metrics/metricstest"
)

// The cost of counting one Event, on the goroutine that did the work, from
// many goroutines at once.
func BenchmarkObserver(b *testing.B) {
	m, _ := newMetrics(b, nil)
	metricstest.BenchObserver(b, m.CacheObserver("c"), m.LockObserver("l"), m.MiddlewareObserver("m"))
}

// Near-cache hits, the cheapest path an Observer runs on, without and with
// the Metrics' Observer: the difference is what counting costs in place.
func BenchmarkNearHit(b *testing.B) {
	metricstest.BenchNearHit(b, redistest.Shared(b, redistest.Redis8).NewClient, func(tb testing.TB) func(cache.Event) {
		m, _ := newMetrics(tb, nil)
		return m.CacheObserver("c")
	})
}
