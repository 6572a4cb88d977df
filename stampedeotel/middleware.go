package stampedeotel

import (
	"context"
	"sync"

	"github.com/hotkv/stampede/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// otherRoute is the http.route of the events of routes beyond MaxRoutes.
const otherRoute = "other"

// MiddlewareObserver returns a function for middleware.Options.Observer
// that records the Middleware's Events with the attribute
// stampede.middleware=name: every Event in stampede.middleware.events by
// http.route, kind and reason (stampede.reason, absent when empty), and
// its Duration in stampede.middleware.duration by route and kind; a
// request that rendered for the cache (miss) and a render finished in the
// background also get a span, stampede.middleware.render.
//
// The route is Event.Route: the chi route pattern where the middleware
// runs inside a chi route, else the request's path. Only the first
// Options.MaxRoutes distinct routes are recorded as they are; the events
// of any other route are recorded under "other", so that a path attribute
// cannot grow without bound. Spans carry the same bounded route.
//
// The function is safe for concurrent use.
func (t *Telemetry) MiddlewareObserver(name string) func(middleware.Event) {
	o := &httpObserver{t: t, name: keyMiddleware.String(name), series: map[httpKey]*httpSeries{}, routes: map[string]struct{}{}}
	return o.observe
}

type httpObserver struct {
	t    *Telemetry
	name attribute.KeyValue

	mu     sync.RWMutex            // guards series and routes
	series map[httpKey]*httpSeries // keyed by recorded routes and otherRoute only
	routes map[string]struct{}     // the routes recorded as they are; at most t.maxRoutes
}

type httpKey struct {
	route, reason string
	kind          middleware.EventKind
}

type httpSeries struct {
	add    []metric.AddOption
	record []metric.RecordOption
	attrs  []attribute.KeyValue // of the span
}

func (o *httpObserver) observe(e middleware.Event) {
	k := httpKey{route: e.Route, reason: e.Reason, kind: e.Kind}
	o.mu.RLock()
	s := o.series[k]
	if s == nil && len(o.routes) >= o.t.maxRoutes {
		if _, ok := o.routes[k.route]; !ok {
			k.route = otherRoute
			s = o.series[k]
		}
	}
	o.mu.RUnlock()
	if s == nil {
		s = o.add(k)
	}
	ctx := context.Background()
	o.t.httpEvents.Add(ctx, 1, s.add...)
	o.t.httpDuration.Record(ctx, e.Duration.Seconds(), s.record...)
	if e.Kind == middleware.EventMiss || e.Kind == middleware.EventBackground {
		o.t.span(spanRender, e.Duration, e.Err, s.attrs...)
	}
}

// add returns the series of k, creating it, and admitting k's route if
// there is room for it.
func (o *httpObserver) add(k httpKey) *httpSeries {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.routes[k.route]; !ok && k.route != otherRoute {
		if len(o.routes) < o.t.maxRoutes {
			o.routes[k.route] = struct{}{}
		} else {
			k.route = otherRoute
		}
	}
	if s := o.series[k]; s != nil {
		return s
	}
	kvs := []attribute.KeyValue{o.name, keyRoute.String(k.route), keyEvent.String(k.kind.String())}
	withReason := kvs
	if k.reason != "" {
		withReason = append(kvs[:len(kvs):len(kvs)], keyReason.String(k.reason))
	}
	s := &httpSeries{add: adding(withReason...), record: recording(kvs...), attrs: withReason}
	o.series[k] = s
	return s
}
