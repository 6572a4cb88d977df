package metrics

import (
	"net/http"
	"sync"

	"github.com/hotkv/stampede/middleware"
)

// OtherRoute is the route under which Routes counts the events of every
// route beyond the first ones it admitted.
const OtherRoute = "other"

// RouteKey is what the series of a middleware's Events are told apart by:
// the Event's Route (or OtherRoute), Reason, Kind, Method and Status, each
// bounded (see Routes).
type RouteKey struct {
	Route, Reason string
	Kind          middleware.EventKind
	// Method is the Event's Method if it is one of the methods of RFC
	// 9110 (GET, HEAD, POST, PUT, DELETE, CONNECT, OPTIONS, TRACE), PATCH
	// or QUERY (the known methods of OpenTelemetry's semantic
	// conventions), otherwise "_OTHER" (their name for the others): the
	// client chooses the method, and a label must not grow with it.
	Method string
	// Status is the Event's Status if it is a status code (100 to 599),
	// otherwise 0.
	Status int
}

// routeKey returns the bounded key of e.
func routeKey(e middleware.Event) RouteKey {
	k := RouteKey{Route: e.Route, Reason: e.Reason, Kind: e.Kind, Method: knownMethod(e.Method), Status: e.Status}
	if k.Status < 100 || k.Status > 599 {
		k.Status = 0
	}
	return k
}

// knownMethod returns method if it is one of RouteKey.Method's, else
// "_OTHER".
func knownMethod(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodConnect, http.MethodOptions, http.MethodTrace, http.MethodPatch, "QUERY":
		return method
	}
	return "_OTHER"
}

// Routes holds the series of a middleware's Events by RouteKey, admitting
// only the first max distinct routes (see NewRoutes) and counting every
// other route as OtherRoute, so that the route label cannot grow without
// bound; methods and status codes are bounded by RouteKey's rules. S is
// the backend's series (counters, attribute sets, ...).
//
// Routes is safe for concurrent use. Use NewRoutes to create one.
type Routes[S any] struct {
	max    int               // routes admitted as they are
	create func(RouteKey) *S // makes the series of a key not seen before

	mu     sync.RWMutex        // guards series and routes
	series map[RouteKey]*S     // keyed by admitted routes and OtherRoute only
	routes map[string]struct{} // the admitted routes; at most max
}

// NewRoutes returns Routes admitting max routes (DefaultMaxRoutes is the
// adapters' default; 0 admits none), whose series create makes: under a
// lock, once per key, with RouteKey.Route the bounded route.
func NewRoutes[S any](max int, create func(RouteKey) *S) *Routes[S] {
	return &Routes[S]{max: max, create: create, series: map[RouteKey]*S{}, routes: map[string]struct{}{}}
}

// Series returns the series of e, creating it if need be. Once it exists,
// finding it takes a read lock and allocates nothing.
func (r *Routes[S]) Series(e middleware.Event) *S {
	k := routeKey(e)
	r.mu.RLock()
	s := r.series[k]
	if s == nil && len(r.routes) >= r.max {
		if _, ok := r.routes[k.Route]; !ok {
			k.Route = OtherRoute
			s = r.series[k]
		}
	}
	r.mu.RUnlock()
	if s == nil {
		s = r.add(k)
	}
	return s
}

// add returns the series of k, creating it, and admitting k's route if
// there is room for it.
func (r *Routes[S]) add(k RouteKey) *S {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.routes[k.Route]; !ok && k.Route != OtherRoute {
		if len(r.routes) < r.max {
			r.routes[k.Route] = struct{}{}
		} else {
			k.Route = OtherRoute
		}
	}
	if s := r.series[k]; s != nil {
		return s
	}
	s := r.create(k)
	r.series[k] = s
	return s
}
