package stampedeotel

import (
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/hotkv/stampede/loader"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Traced returns load wrapped in a span named name, a child of the span in
// the context load is called with. Give it to cache.GetOrLoad to see a
// load inside the trace of the request that caused it: the cache calls
// the loader on a context that keeps the values of the first caller's
// context (not its cancellation), so the span's parent is that caller's
// span. A background refresh is a child of the span of the call that
// found the value stale. loader.ErrNotFound is recorded as an answer
// (attribute stampede.result=not-found), other errors as the span's
// Error status with their error.type, and so is a panic (error.type
// panic), which goes on to the cache.
//
//	u, err := cache.GetOrLoad(ctx, c, key, stampedeotel.Traced(tel, "load user", loadUser))
//
// Under a Cache whose Observer is t's CacheObserver (alone or in a
// Chain), this span is the only one of the load: the CacheObserver
// records the load's duration but makes no stampede.cache.load span for
// it. This is how they agree: the cache calls a loader with a context of
// that load's own and reports the load (cache.EventLoad) with that very
// context in Event.Context, on the goroutine the loader returned on, just
// after it returned; Traced notes the context as it returns, and the
// CacheObserver that receives the EventLoad carrying a noted context takes
// the note and makes no span. A note that no CacheObserver of t takes
// (the Cache's Observer is another, or load was called by something else
// than a Cache) is dropped a few seconds after its context ends.
//
// NOTE: Traced must be the outermost wrapper of the loader the cache is
// given: inside another (loader.WithRetry, loader.WithTimeout) it is
// called with that wrapper's context, not the cache's, and the load gets
// both spans. Wrap the other wrappers instead:
// Traced(tel, "load user", loader.WithRetry(...)), which also makes one
// span of all the attempts.
func Traced[V any](t *Telemetry, name string, load func(context.Context) (V, error)) func(context.Context) (V, error) {
	return func(ctx context.Context) (v V, err error) {
		// Deferred first, so run last: once the span has ended, before
		// the cache reports the load (a panic included).
		defer t.noteTraced(ctx)
		sctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
		returned := false
		defer func() {
			if !returned { // load panicked; the cache recovers it (a *loader.PanicError)
				span.SetAttributes(keyResult.String("error"), keyErrorType.String("panic"))
				span.SetStatus(codes.Error, "panic")
			}
			span.End()
		}()
		v, err = load(sctx)
		returned = true
		switch {
		case err == nil:
			span.SetAttributes(keyResult.String("ok"))
		case errors.Is(err, loader.ErrNotFound):
			span.SetAttributes(keyResult.String("not-found"))
		default:
			span.SetAttributes(keyResult.String("error"), keyErrorType.String(t.errTypes.of(err)))
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		return v, err
	}
}

// tracedGrace is how long a note of Traced's is kept after its context
// ended, in case the EventLoad that takes it is still to come: the
// context ended before the loader returned (LoadTimeout passed, or every
// caller left), and the cache reports the load just after.
const tracedGrace = 5 * time.Second

// tracedLoad is a note of Traced's (Telemetry.traced): the load run on
// its context has Traced's span.
type tracedLoad struct{ _ byte } // not zero-sized: each note is a distinct pointer

// noteTraced notes that the load run on ctx, the loader's context, has
// Traced's span, for the CacheObserver that reports it (tracedTake).
func (t *Telemetry) noteTraced(ctx context.Context) {
	if ctx.Done() == nil || !reflect.TypeOf(ctx).Comparable() {
		return // not a Cache's loader context (that has LoadTimeout): nobody takes the note
	}
	note := &tracedLoad{}
	if _, dup := t.traced.LoadOrStore(ctx, note); dup {
		return
	}
	t.tracedN.Add(1)
	// The cache ends a loader's context after it has reported the load:
	// a note still here then was taken by no CacheObserver of t, unless
	// the context ended before the load returned, and its report is still
	// to come.
	context.AfterFunc(ctx, func() {
		if v, ok := t.traced.Load(ctx); ok && v == note {
			time.AfterFunc(tracedGrace, func() {
				if t.traced.CompareAndDelete(ctx, note) {
					t.tracedN.Add(-1)
				}
			})
		}
	})
}

// tracedTake reports whether Traced made the span of the load reported
// with ctx (an EventLoad's Context), taking the note.
func (t *Telemetry) tracedTake(ctx context.Context) bool {
	if t.tracedN.Load() == 0 || ctx == nil || !reflect.TypeOf(ctx).Comparable() {
		return false // no note (Traced notes before the report, on the same goroutine)
	}
	if _, ok := t.traced.LoadAndDelete(ctx); ok {
		t.tracedN.Add(-1)
		return true
	}
	return false
}
