package stampedeotel

import (
	"context"
	"math"

	"github.com/hotkv/stampede/metrics"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// eventTable reports the events of one Observer, counted in place by
// kind and tier, into the observable counters stampede.cache.events and
// stampede.lock.events.
//
// Counting in place and reporting at collection keeps the SDK off the
// hot path: an atomic add costs a few nanoseconds, a synchronous
// counter's Add (attribute lookup, aggregation) over a hundred, which is
// more than a near-cache hit takes.
type eventTable[K metrics.Kind] struct {
	*metrics.Events[K]
	// opts holds the attributes of each series, set once before the
	// table is shared: opts[kind][tier], nil for series that do not
	// exist.
	opts [math.MaxUint8 + 1][3]metric.ObserveOption
}

// newEventTable returns a table for the kinds of K; tiered lists the (at
// most two) kinds split by tier. base is the Observer's name attribute.
func newEventTable[K metrics.Kind](base attribute.KeyValue, tiered ...K) *eventTable[K] {
	tb := &eventTable[K]{Events: metrics.NewEvents(tiered...)}
	for k := range math.MaxUint8 + 1 {
		// Kind 0 ("unknown") counts every value that is no kind.
		if s := K(k).String(); k == 0 || s != "unknown" {
			tb.opts[k][metrics.NoTier] = metric.WithAttributeSet(attribute.NewSet(base, keyEvent.String(s)))
		}
	}
	for _, k := range tiered {
		for _, tier := range []metrics.Tier{metrics.Server, metrics.Near} {
			tb.opts[k][tier] = metric.WithAttributeSet(attribute.NewSet(base, keyEvent.String(k.String()), keyTier.String(tier.String())))
		}
	}
	return tb
}

// observe reports every series of the table (zeros included, as a
// Prometheus client would; the unknown kinds only once counted).
func (tb *eventTable[K]) observe(o metric.Observer, inst metric.Int64Observable) {
	tb.Each(func(k K, tier metrics.Tier, n uint64) {
		o.ObserveInt64(inst, int64(n), tb.opts[k][tier])
	})
}

// addTable adds tb to the tables observed into inst.
func addTable[K metrics.Kind](t *Telemetry, tables *[]*eventTable[K], tb *eventTable[K]) {
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
