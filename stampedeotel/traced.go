package stampedeotel

import (
	"context"
	"errors"

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
// Error status.
//
//	u, err := cache.GetOrLoad(ctx, c, key, stampedeotel.Traced(tel, "load user", loadUser))
func Traced[V any](t *Telemetry, name string, load func(context.Context) (V, error)) func(context.Context) (V, error) {
	return func(ctx context.Context) (V, error) {
		ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal))
		defer span.End()
		v, err := load(ctx)
		switch {
		case err == nil:
			span.SetAttributes(keyResult.String("ok"))
		case errors.Is(err, loader.ErrNotFound):
			span.SetAttributes(keyResult.String("not-found"))
		default:
			span.SetAttributes(keyResult.String("error"))
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		return v, err
	}
}
