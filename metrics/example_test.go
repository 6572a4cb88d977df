package metrics_test

import (
	"fmt"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/metrics"
	"github.com/hotkv/stampede/middleware"
)

// An adapter counts a Cache's Events in place and reports the counts when
// its backend collects; here the backend is fmt.
func ExampleEvents() {
	events := metrics.NewEvents(cache.EventHit, cache.EventStale)
	observer := func(e cache.Event) { events.Count(e.Kind, e.Near) }
	// The Cache calls observer (cache.Options.Observer) as it works:
	observer(cache.Event{Kind: cache.EventHit, Near: true})
	observer(cache.Event{Kind: cache.EventHit})
	observer(cache.Event{Kind: cache.EventMiss})
	observer(cache.Event{Kind: cache.EventLoad})

	// When the backend collects:
	events.Each(func(k cache.EventKind, tier metrics.Tier, n uint64) {
		if n > 0 {
			fmt.Println(k, tier, n)
		}
	})
	// Output:
	// hit server 1
	// hit near 1
	// miss  1
	// load  1
}

// Routes keeps the route label bounded: past the routes it admits, events
// share the series of OtherRoute.
func ExampleRoutes() {
	type series struct{ n int }
	routes := metrics.NewRoutes(2, func(k metrics.RouteKey) *series { return &series{} })
	for _, route := range []string{"/users/{id}", "/orders/{id}", "/users/{id}", "/search", "/help"} {
		routes.Series(middleware.Event{Kind: middleware.EventHit, Route: route}).n++
	}
	for _, route := range []string{"/users/{id}", "/orders/{id}", metrics.OtherRoute} {
		s := routes.Series(middleware.Event{Kind: middleware.EventHit, Route: route})
		fmt.Println(route, s.n)
	}
	// Output:
	// /users/{id} 2
	// /orders/{id} 1
	// other 2
}
