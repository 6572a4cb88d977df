package stampedeotel

import (
	"context"

	"github.com/hotkv/stampede/internal/obs"
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
type eventTable struct {
	*obs.Events
	// opts holds the attributes of each series, set once before the
	// table is shared: opts[kind][tier], nil for series that do not
	// exist.
	opts [obs.Kinds][3]metric.ObserveOption
}

// newEventTable returns a table for the kinds whose String is name(k)
// ("unknown" for kinds that do not exist); tiered lists the (at most two)
// kinds split by tier. base is the Observer's name attribute.
func newEventTable(base attribute.KeyValue, name func(k int) string, tiered ...int) *eventTable {
	tb := &eventTable{Events: obs.NewEvents(name, tiered...)}
	for k := range obs.Kinds {
		if s := tb.Name(k); s != "" {
			tb.opts[k][obs.NoTier] = metric.WithAttributeSet(attribute.NewSet(base, keyEvent.String(s)))
		}
	}
	for _, k := range tiered {
		for _, tier := range []obs.Tier{obs.Server, obs.Near} {
			tb.opts[k][tier] = metric.WithAttributeSet(attribute.NewSet(base, keyEvent.String(tb.Name(k)), keyTier.String(tier.String())))
		}
	}
	return tb
}

// observe reports every series of the table (zeros included, as a
// Prometheus client would; the unknown kinds only once counted).
func (tb *eventTable) observe(o metric.Observer, inst metric.Int64Observable) {
	tb.Each(func(k int, tier obs.Tier, n uint64) {
		o.ObserveInt64(inst, int64(n), tb.opts[k][tier])
	})
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
