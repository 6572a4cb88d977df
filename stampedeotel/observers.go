package stampedeotel

import (
	"context"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/lock"
	"github.com/hotkv/stampede/metrics"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Span names.
const (
	spanLoad   = "stampede.cache.load"
	spanWait   = "stampede.cache.wait"
	spanObtain = "stampede.lock.obtain"
	spanRender = "stampede.middleware.render"
)

// adding returns the options of an Add with the attributes kvs, built
// once so that each Add allocates nothing.
func adding(kvs ...attribute.KeyValue) []metric.AddOption {
	return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
}

// recording is adding for a Record.
func recording(kvs ...attribute.KeyValue) []metric.RecordOption {
	return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}
}

// byResult is what an Observer records for one result of a timed event:
// the histogram's options and the span's attributes; a failure's, by
// error.type, come from failed.
type byResult struct {
	record []metric.RecordOption
	attrs  []attribute.KeyValue
	failed *failures // the same with error.type; nil for those of a failure
}

func results(name attribute.KeyValue, rs ...string) []byResult {
	out := make([]byResult, len(rs))
	for i, r := range rs {
		kvs := []attribute.KeyValue{name, keyResult.String(r)}
		out[i] = byResult{record: recording(kvs...), attrs: kvs, failed: newFailures(kvs)}
	}
	return out
}

// failure returns what the failure err of result r records: r's
// attributes with err's error.type.
func (t *Telemetry) failure(r *byResult, err error) *byResult {
	return r.failed.with(t.errTypes.of(err))
}

// eventContext returns an Event's Context, or context.Background() for an
// Event made without one.
func eventContext(ctx context.Context) context.Context {
	if ctx == nil {
		return context.Background()
	}
	return ctx
}

// spanAttrs returns the attributes of a span about key.
func (t *Telemetry) spanAttrs(base []attribute.KeyValue, key string) []attribute.KeyValue {
	if !t.spanKeys {
		return base
	}
	return append(base[:len(base):len(base)], keyKey.String(key))
}

// CacheObserver returns a function for cache.Options.Observer that records
// the Cache's Events with the attribute stampede.cache=name: every Event
// in stampede.cache.events by its kind (and, for hits and stale hits, its
// tier: near or server), the loader's run time in
// stampede.cache.load.duration and the wait for another process's load in
// stampede.cache.wait.duration, each by result (and error.type for a
// failure) and with a span (stampede.cache.load, stampede.cache.wait), a
// child of the span in the Event's Context: the caller's. A load whose
// loader Traced wrapped has Traced's span only. The calls of this process
// each load answered (cache.EventServed's Callers) go to
// stampede.cache.load.callers.
//
// Events are counted in place and reported when the meter collects; the
// attribute sets of the histograms are built now, so that recording an
// event allocates nothing (spans aside). Each Cache should have its own
// name; Caches that share a name add up. The function is safe for
// concurrent use.
func (t *Telemetry) CacheObserver(name string) func(cache.Event) {
	cacheName := keyCache.String(name)
	events := newEventTable(cacheName, cache.EventHit, cache.EventStale)
	addTable(t, &t.cacheTables, events)
	loads := results(cacheName, metrics.LoadResults()...)
	waits := results(cacheName, metrics.WaitResults()...)
	callers := recording(cacheName)
	return func(e cache.Event) {
		events.Count(e.Kind, e.Near)
		switch e.Kind {
		case cache.EventLoad:
			ctx := eventContext(e.Context)
			i := metrics.LoadResult(e.Err)
			r, failed := &loads[i], i == 2 // not found (1) is an answer, not a failure
			if failed {
				r = t.failure(r, e.Err)
			}
			t.cacheLoads.Record(ctx, e.Duration.Seconds(), r.record...)
			if !t.tracedTake(e.Context) {
				t.span(ctx, spanLoad, e.Duration, failed, e.Err, t.spanAttrs(r.attrs, e.Key)...)
			}
		case cache.EventWait:
			ctx := eventContext(e.Context)
			r, failed := &waits[metrics.WaitResult(e.Err)], e.Err != nil
			if failed {
				r = t.failure(r, e.Err)
			}
			t.cacheWaits.Record(ctx, e.Duration.Seconds(), r.record...)
			t.span(ctx, spanWait, e.Duration, failed, e.Err, t.spanAttrs(r.attrs, e.Key)...)
		case cache.EventServed:
			t.cacheCallers.Record(eventContext(e.Context), int64(e.Callers), callers...)
		}
	}
}

// LockObserver returns a function for lock.Options.Observer that records
// the lock Client's Events with the attribute stampede.lock=name: every
// Event in stampede.lock.events by its kind, the time each Obtain took
// (retries and waiting included) in stampede.lock.obtain.duration by
// result (and error.type for a failure), with a span
// (stampede.lock.obtain, a child of the span of Obtain's ctx; a lock not
// obtained is not an error there, a failed server call is), and how long
// each released lock was held in stampede.lock.held.duration.
//
// Events are counted in place and reported when the meter collects; the
// attribute sets of the histograms are built now, so that recording an
// event allocates nothing (spans aside). The function is safe for
// concurrent use.
func (t *Telemetry) LockObserver(name string) func(lock.Event) {
	lockName := keyLock.String(name)
	events := newEventTable[lock.EventKind](lockName)
	addTable(t, &t.lockTables, events)
	obtain := results(lockName, lock.EventObtained.String(), lock.EventNotObtained.String(), lock.EventObtainFailed.String())
	held := recording(lockName)
	return func(e lock.Event) {
		events.Count(e.Kind, false)
		i := -1
		switch e.Kind {
		case lock.EventObtained:
			i = 0
		case lock.EventNotObtained:
			i = 1
		case lock.EventObtainFailed:
			i = 2
		case lock.EventReleased:
			t.lockHeld.Record(eventContext(e.Context), e.Duration.Seconds(), held...)
		}
		if i >= 0 {
			ctx := eventContext(e.Context)
			r, failed := &obtain[i], i == 2
			if failed {
				r = t.failure(r, e.Err)
			}
			t.lockObtain.Record(ctx, e.Duration.Seconds(), r.record...)
			t.span(ctx, spanObtain, e.Duration, failed, e.Err, t.spanAttrs(r.attrs, e.Key)...)
		}
	}
}
