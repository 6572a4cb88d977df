package stampedeprom

import (
	"github.com/hotkv/stampede/metrics"
	"github.com/hotkv/stampede/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// MiddlewareObserver returns a function for middleware.Options.Observer
// that counts the Middleware's Events under the label middleware=name:
// every Event in stampede_middleware_events_total by route, kind and
// reason, and its Duration in stampede_middleware_duration_seconds by
// route and kind.
//
// The route label is Event.Route: the route's pattern (chi's, or a
// ServeMux pattern) or "unknown", never a path. Only the first
// Options.MaxRoutes distinct routes get a label of their own; the events
// of any other route are counted under "other", so that the label cannot
// grow without bound.
//
// The function is safe for concurrent use.
func (m *Metrics) MiddlewareObserver(name string) func(middleware.Event) {
	routes := metrics.NewRoutes(m.maxRoutes, func(k metrics.RouteKey) *httpSeries {
		kind := k.Kind.String()
		return &httpSeries{
			count: m.httpEvents.WithLabelValues(name, k.Route, kind, k.Reason),
			dur:   m.httpDuration.WithLabelValues(name, k.Route, kind),
		}
	})
	return func(e middleware.Event) {
		s := routes.Series(e)
		s.count.Inc()
		s.dur.Observe(e.Duration.Seconds())
	}
}

// httpSeries is what a MiddlewareObserver counts the events of one
// metrics.RouteKey in.
type httpSeries struct {
	count prometheus.Counter
	dur   prometheus.Observer
}
