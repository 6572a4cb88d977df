package stampedeprom

import (
	"sync"

	"github.com/hotkv/stampede/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// otherRoute is the route label of the events of routes beyond MaxRoutes.
const otherRoute = "other"

// MiddlewareObserver returns a function for middleware.Options.Observer
// that counts the Middleware's Events under the label middleware=name:
// every Event in stampede_middleware_events_total by route, kind and
// reason, and its Duration in stampede_middleware_duration_seconds by
// route and kind.
//
// The route label is Event.Route: the chi route pattern where the
// middleware runs inside a chi route, else the request's path. Only the
// first Options.MaxRoutes distinct routes get a label of their own; the
// events of any other route are counted under "other", so that a path
// label cannot grow without bound.
//
// The function is safe for concurrent use.
func (m *Metrics) MiddlewareObserver(name string) func(middleware.Event) {
	o := &httpObserver{m: m, name: name, max: m.maxRoutes, series: map[httpKey]*httpSeries{}, routes: map[string]struct{}{}}
	return o.observe
}

type httpObserver struct {
	m    *Metrics
	name string
	max  int // routes with a label of their own

	mu     sync.RWMutex            // guards series and routes
	series map[httpKey]*httpSeries // keyed by labelled routes and otherRoute only
	routes map[string]struct{}     // the routes with a label of their own; at most max
}

type httpKey struct {
	route, reason string
	kind          middleware.EventKind
}

type httpSeries struct {
	count prometheus.Counter
	dur   prometheus.Observer
}

func (o *httpObserver) observe(e middleware.Event) {
	k := httpKey{route: e.Route, reason: e.Reason, kind: e.Kind}
	o.mu.RLock()
	s := o.series[k]
	if s == nil && len(o.routes) >= o.max {
		if _, ok := o.routes[k.route]; !ok {
			k.route = otherRoute
			s = o.series[k]
		}
	}
	o.mu.RUnlock()
	if s == nil {
		s = o.add(k)
	}
	s.count.Inc()
	s.dur.Observe(e.Duration.Seconds())
}

// add returns the series of k, creating it, and admitting k's route if
// there is room for it.
func (o *httpObserver) add(k httpKey) *httpSeries {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.routes[k.route]; !ok && k.route != otherRoute {
		if len(o.routes) < o.max {
			o.routes[k.route] = struct{}{}
		} else {
			k.route = otherRoute
		}
	}
	if s := o.series[k]; s != nil {
		return s
	}
	kind := k.kind.String()
	s := &httpSeries{
		count: o.m.httpEvents.WithLabelValues(o.name, k.route, kind, k.reason),
		dur:   o.m.httpDuration.WithLabelValues(o.name, k.route, kind),
	}
	o.series[k] = s
	return s
}
