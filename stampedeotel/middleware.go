package stampedeotel

import (
	"net/http"
	"slices"
	"strconv"

	"github.com/hotkv/stampede/metrics"
	"github.com/hotkv/stampede/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// MiddlewareObserver returns a function for middleware.Options.Observer
// that records the Middleware's Events with the attribute
// stampede.middleware=name: every Event in stampede.middleware.events by
// http.route, http.request.method, http.response.status_code (absent when
// no response was sent), kind and reason (stampede.reason, absent when
// empty), and its Duration in stampede.middleware.duration by the same
// but the reason, with error.type for a failure; a request that rendered
// for the cache (miss) and a render finished in the background also get a
// span, stampede.middleware.render, a child of the span in the Event's
// Context (the request's).
//
// A failure is an Event with an error (error.type: see the package doc)
// or whose status is 500 or more (error.type: the status code, as the
// semantic conventions say for HTTP). Its span's status is Error.
//
// The route is Event.Route: the route's pattern (chi's, or a ServeMux
// pattern) or "unknown", never a path. Only the first
// Options.MaxRoutes distinct routes are recorded as they are; the events
// of any other route are recorded under "other", so that the attribute
// cannot grow without bound. The method is the request's if the semantic
// conventions know it (GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS,
// TRACE, PATCH, QUERY), otherwise _OTHER (see metrics.RouteKey), since the
// client chooses it; a span of a request with another method also has
// http.request.method_original. Spans carry the same bounded route.
//
// The function is safe for concurrent use.
func (t *Telemetry) MiddlewareObserver(name string) func(middleware.Event) {
	mw := keyMiddleware.String(name)
	routes := metrics.NewRoutes(t.maxRoutes, func(k metrics.RouteKey) *httpSeries {
		kvs := []attribute.KeyValue{mw, keyRoute.String(k.Route), keyEvent.String(k.Kind.String()), keyMethod.String(k.Method)}
		if k.Status != 0 {
			kvs = append(kvs, keyStatus.Int(k.Status))
		}
		withReason := kvs
		if k.Reason != "" {
			withReason = append(kvs[:len(kvs):len(kvs)], keyReason.String(k.Reason))
		}
		return &httpSeries{
			add: adding(withReason...), record: recording(kvs...), attrs: withReason,
			method: k.Method, failed: newFailures(kvs),
		}
	})
	return func(e middleware.Event) {
		s := routes.Series(e)
		ctx := eventContext(e.Context)
		record, errType := s.record, ""
		if e.Err != nil || e.Status >= http.StatusInternalServerError {
			errType = t.httpErrorType(e)
			record = s.failed.with(errType).record
		}
		t.httpEvents.Add(ctx, 1, s.add...)
		t.httpDuration.Record(ctx, e.Duration.Seconds(), record...)
		if e.Kind == middleware.EventMiss || e.Kind == middleware.EventBackground {
			attrs := slices.Clip(s.attrs) // appended to: a copy
			if errType != "" {
				attrs = append(attrs, keyErrorType.String(errType))
			}
			if e.Method != s.method && e.Method != "" {
				attrs = append(attrs, keyMethodOriginal.String(e.Method))
			}
			t.span(ctx, spanRender, e.Duration, errType != "", e.Err, attrs...)
		}
	}
}

// httpErrorType returns the error.type of e, a failure: its error's, or
// its status code.
func (t *Telemetry) httpErrorType(e middleware.Event) string {
	if e.Err != nil {
		return t.errTypes.of(e.Err)
	}
	return strconv.Itoa(e.Status)
}

// httpSeries is what a MiddlewareObserver records the events of one
// metrics.RouteKey with.
type httpSeries struct {
	add    []metric.AddOption
	record []metric.RecordOption
	attrs  []attribute.KeyValue // of the span
	method string               // http.request.method (metrics.RouteKey.Method)
	failed *failures            // record, with error.type
}
