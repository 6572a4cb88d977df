package stampedeotel

import (
	"context"
	"sync/atomic"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// eventTable counts the events of one Observer by kind and tier, for the
// observable counters stampede.cache.events and stampede.lock.events.
//
// Counting in place and reporting at collection keeps the SDK off the
// hot path: an atomic add costs a few nanoseconds, a synchronous
// counter's Add (attribute lookup, aggregation) over a hundred, which is
// more than a near-cache hit takes. The kinds split by tier (cache hits
// and stale hits) are counted in striped counters, as package cache
// counts them, so that cores counting hits at once do not take turns
// owning one cache line.
type eventTable struct {
	// counts[kind] for kinds without tiers. Kind 0 is never sent; it
	// counts the kinds whose String is "unknown".
	counts [kinds]atomic.Uint64
	// tiered[hotIdx[kind]-1][tier] for kinds with tiers: tier 0 the
	// server, 1 the near cache.
	tiered [2][2]striped
	hotIdx [kinds]uint8
	// opts holds the attributes of each series, set once before the
	// table is shared: opts[kind][tier], nil for kinds that do not exist
	// and for tier 1 of kinds without tiers.
	opts [kinds][2]metric.ObserveOption
}

// newEventTable returns a table for the kinds whose String is name(k)
// ("unknown" for kinds that do not exist); tiered lists the (at most two)
// kinds split by tier. base is the Observer's name attribute.
func newEventTable(base attribute.KeyValue, name func(k int) string, tiered ...int) *eventTable {
	tb := &eventTable{}
	for i, k := range tiered {
		tb.hotIdx[k] = uint8(i + 1)
	}
	tb.opts[0][0] = metric.WithAttributeSet(attribute.NewSet(base, keyEvent.String("unknown")))
	for k := 1; k < kinds; k++ {
		s := name(k)
		switch {
		case s == "unknown":
		case tb.hotIdx[k] != 0:
			tb.opts[k][0] = metric.WithAttributeSet(attribute.NewSet(base, keyEvent.String(s), keyTier.String("server")))
			tb.opts[k][1] = metric.WithAttributeSet(attribute.NewSet(base, keyEvent.String(s), keyTier.String("near")))
		default:
			tb.opts[k][0] = metric.WithAttributeSet(attribute.NewSet(base, keyEvent.String(s)))
		}
	}
	return tb
}

// count counts one event of kind k; near says it came from the near
// cache (ignored for kinds without tiers).
func (tb *eventTable) count(k uint8, near bool) {
	switch {
	case tb.hotIdx[k] != 0:
		tier := 0
		if near {
			tier = 1
		}
		tb.tiered[tb.hotIdx[k]-1][tier].add()
	case tb.opts[k][0] == nil:
		tb.counts[0].Add(1)
	default:
		tb.counts[k].Add(1)
	}
}

// observe reports every series of the table (zeros included, as a
// Prometheus client would; the unknown kinds only once counted).
func (tb *eventTable) observe(o metric.Observer, inst metric.Int64Observable) {
	for k := range tb.opts {
		if h := tb.hotIdx[k]; h != 0 {
			for tier, opt := range tb.opts[k] {
				if opt != nil {
					o.ObserveInt64(inst, int64(tb.tiered[h-1][tier].load()), opt)
				}
			}
			continue
		}
		if n := tb.counts[k].Load(); tb.opts[k][0] != nil && (k != 0 || n != 0) {
			o.ObserveInt64(inst, int64(n), tb.opts[k][0])
		}
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

// addTable adds tb to the tables observed into inst.
func (t *Telemetry) addTable(tables *[]*eventTable, tb *eventTable) {
	t.mu.Lock()
	defer t.mu.Unlock()
	*tables = append(*tables, tb)
}

// registerEvents registers the callback that reports the event tables.
func (t *Telemetry) registerEvents(meter metric.Meter) error {
	_, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		t.mu.Lock()
		caches, locks := t.cacheTables, t.lockTables
		t.mu.Unlock()
		for _, tb := range caches {
			tb.observe(o, t.cacheEvents)
		}
		for _, tb := range locks {
			tb.observe(o, t.lockEvents)
		}
		return nil
	}, t.cacheEvents, t.lockEvents)
	return err
}
