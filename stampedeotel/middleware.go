package stampedeotel

import (
	"github.com/hotkv/stampede/metrics"
	"github.com/hotkv/stampede/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// MiddlewareObserver returns a function for middleware.Options.Observer
// that records the Middleware's Events with the attribute
// stampede.middleware=name: every Event in stampede.middleware.events by
// http.route, kind and reason (stampede.reason, absent when empty), and
// its Duration in stampede.middleware.duration by route and kind; a
// request that rendered for the cache (miss) and a render finished in the
// background also get a span, stampede.middleware.render, a child of the
// span in the Event's Context (the request's).
//
// The route is Event.Route: the route's pattern (chi's, or a ServeMux
// pattern) or "unknown", never a path. Only the first
// Options.MaxRoutes distinct routes are recorded as they are; the events
// of any other route are recorded under "other", so that the attribute
// cannot grow without bound. Spans carry the same bounded route.
//
// The function is safe for concurrent use.
func (t *Telemetry) MiddlewareObserver(name string) func(middleware.Event) {
	mw := keyMiddleware.String(name)
	routes := metrics.NewRoutes(t.maxRoutes, func(k metrics.RouteKey) *httpSeries {
		kvs := []attribute.KeyValue{mw, keyRoute.String(k.Route), keyEvent.String(k.Kind.String())}
		withReason := kvs
		if k.Reason != "" {
			withReason = append(kvs[:len(kvs):len(kvs)], keyReason.String(k.Reason))
		}
		return &httpSeries{add: adding(withReason...), record: recording(kvs...), attrs: withReason}
	})
	return func(e middleware.Event) {
		s := routes.Series(e)
		ctx := eventContext(e.Context)
		t.httpEvents.Add(ctx, 1, s.add...)
		t.httpDuration.Record(ctx, e.Duration.Seconds(), s.record...)
		if e.Kind == middleware.EventMiss || e.Kind == middleware.EventBackground {
			t.span(ctx, spanRender, e.Duration, e.Err != nil, e.Err, s.attrs...)
		}
	}
}

// httpSeries is what a MiddlewareObserver records the events of one
// metrics.RouteKey with.
type httpSeries struct {
	add    []metric.AddOption
	record []metric.RecordOption
	attrs  []attribute.KeyValue // of the span
}
