package stampedeotel

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// eventTable counts the events of one Observer by kind and tier, for the
// observable counters stampede.cache.events and stampede.lock.events.
//
// Counting in place and reporting at collection keeps the SDK off the
// hot path: an atomic add costs a few nanoseconds, a synchronous
// counter's Add (attribute lookup, aggregation) over a hundred, which is
// more than a near-cache hit takes.
type eventTable struct {
	// counts[kind][tier]: tier 0 is the server (and every kind without
	// tiers), 1 the near cache. Kind 0 is never sent; it counts the kinds
	// whose String is "unknown".
	counts [kinds][2]atomic.Uint64
	// opts holds the attributes of each counted series, set once before
	// the table is shared; nil for kinds that do not exist and tiers a
	// kind does not have.
	opts [kinds][2]metric.ObserveOption
}

// newEventTable returns a table for the kinds whose String is name(k)
// ("unknown" for kinds that do not exist); tiered says which kinds are
// split by tier. base is the Observer's name attribute.
func newEventTable(base attribute.KeyValue, name func(k int) string, tiered func(k int) bool) *eventTable {
	tb := &eventTable{}
	tb.opts[0][0] = metric.WithAttributeSet(attribute.NewSet(base, keyEvent.String("unknown")))
	for k := 1; k < kinds; k++ {
		s := name(k)
		switch {
		case s == "unknown":
		case tiered(k):
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
	case tb.opts[k][0] == nil:
		tb.counts[0][0].Add(1)
	case near && tb.opts[k][1] != nil:
		tb.counts[k][1].Add(1)
	default:
		tb.counts[k][0].Add(1)
	}
}

// observe reports every series of the table (zeros included, as a
// Prometheus client would; the unknown kinds only once counted).
func (tb *eventTable) observe(o metric.Observer, inst metric.Int64Observable) {
	for k := range tb.opts {
		for tier, opt := range tb.opts[k] {
			n := tb.counts[k][tier].Load()
			if opt != nil && (k != 0 || n != 0) {
				o.ObserveInt64(inst, int64(n), opt)
			}
		}
	}
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
