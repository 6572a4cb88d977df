package stampedeprom

import (
	"sync/atomic"
	"unsafe"

	"github.com/hotkv/stampede/cache"
	"github.com/prometheus/client_golang/prometheus"
)

// cacheTable counts the events of the CacheObservers of one name, for
// stampede_cache_events_total, which the Metrics collect from it.
//
// Hits and stale hits are counted in striped counters, as package cache
// counts them: near-cache hits take tens of nanoseconds, and one counter
// that every core adds to would cost more than that once cores take turns
// owning its cache line. Other kinds are rare enough for one atomic each.
type cacheTable struct {
	name  string
	hot   [2][2]striped // [0 hit, 1 stale][0 server, 1 near]
	other [kinds]atomic.Uint64
	kinds [kinds]string // the kinds that exist, by String; "" for the others
}

func newCacheTable(name string) *cacheTable {
	tb := &cacheTable{name: name}
	for k := 1; k < kinds; k++ {
		if s := cache.EventKind(k).String(); s != "unknown" {
			tb.kinds[k] = s
		}
	}
	return tb
}

// count counts e.
func (tb *cacheTable) count(e cache.Event) {
	tier := 0
	if e.Near {
		tier = 1
	}
	switch {
	case e.Kind == cache.EventHit:
		tb.hot[0][tier].add()
	case e.Kind == cache.EventStale:
		tb.hot[1][tier].add()
	case tb.kinds[e.Kind] != "":
		tb.other[e.Kind].Add(1)
	default:
		tb.other[0].Add(1) // a kind whose String is "unknown"
	}
}

// collect sends the table's series: every kind that exists (zeros
// included), and the unknown kinds once counted.
func (tb *cacheTable) collect(ch chan<- prometheus.Metric, desc *prometheus.Desc) {
	send := func(n uint64, kind, tier string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(n), tb.name, kind, tier)
	}
	for k, kind := range tb.kinds {
		switch {
		case k == int(cache.EventHit) || k == int(cache.EventStale):
			hot := &tb.hot[0]
			if k == int(cache.EventStale) {
				hot = &tb.hot[1]
			}
			send(hot[0].load(), kind, "server")
			send(hot[1].load(), kind, "near")
		case kind != "":
			send(tb.other[k].Load(), kind, "")
		}
	}
	if n := tb.other[0].Load(); n > 0 {
		send(n, "unknown", "")
	}
}

// striped is a counter spread over cache lines, as cache.Stats' hit
// counters are.
type striped [stripes]struct {
	n atomic.Uint64
	_ [56]byte
}

const stripes = 16

// add adds 1 to the stripe of the calling goroutine: goroutines run on
// stacks of their own, at least 2 KiB apart, so a stack address tells
// them apart without shared state.
func (s *striped) add() {
	var here byte
	s[uintptr(unsafe.Pointer(&here))>>11%stripes].n.Add(1)
}

// load returns the sum of the stripes.
func (s *striped) load() uint64 {
	var sum uint64
	for i := range s {
		sum += s[i].n.Load()
	}
	return sum
}
