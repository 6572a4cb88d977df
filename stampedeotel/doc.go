// Package stampedeotel reports what packages cache, lock and middleware
// observe as OpenTelemetry metrics (go.opentelemetry.io/otel/metric) and
// spans (go.opentelemetry.io/otel/trace).
//
// It is built on the packages' hooks: an Observer function per Cache, lock
// Client and Middleware records each Event, and CacheStats reads
// (*cache.Cache).Stats at every collection for the values no Event carries
// (coalesced calls, rebuild-lock contention, the near cache's size).
//
//	tel, err := stampedeotel.New(nil) // the global MeterProvider and TracerProvider
//	c, err := cache.New(rdb, &cache.Options{Observer: tel.CacheObserver("users")})
//	err = tel.CacheStats("users", c)
//	locks, err := lock.New(rdb, &lock.Options{Observer: tel.LockObserver("jobs")})
//	mw, err := middleware.New(c, &middleware.Options{Observer: tel.MiddlewareObserver("pages")})
//
// An Observer that is already set is kept with Chain:
//
//	Observer: stampedeotel.Chain(myObserver, tel.CacheObserver("users"))
//
// # Spans
//
// Events are reported when work ends, with how long it took, so each span
// is made afterwards with its real start (the end less Event.Duration):
// stampede.cache.load for every loader call (background refreshes
// included), stampede.cache.wait for every wait for another process's
// load that reports a cache.EventWait (see CacheStats),
// stampede.lock.obtain for every Obtain, and
// stampede.middleware.render for every request the middleware rendered
// for the cache (MISS) and every render it finished in the background.
// Each is a child of the span in the Event's Context, the context of the
// call it belongs to: the caller's of GetOrLoad (a load keeps the values
// of the first caller's context, a background refresh those of the call
// that found the value stale, a wait those of the waiting call), Obtain's
// ctx, the request's. Failures set the span's status to Error.
//
// A loader wrapped with Traced has a span of its own, named as you like,
// in the same place.
//
// # Attributes
//
// The stampede.event attribute is the EventKind's String ("hit",
// "not-obtained", "bypass", ...), so kinds added to the packages later are
// recorded under their own names without a change here. No attribute
// holds a cache or lock key or a URL unless Options.SpanKeys puts the key
// on spans: keys are unbounded and may be private. The middleware's
// metrics carry http.route, which is Event.Route: the route's pattern
// (chi's, or net/http's ServeMux pattern) or "unknown", never a path;
// Options.MaxRoutes bounds its distinct values (later ones are "other").
//
// # Cost
//
// Observers run synchronously on the packages' hot paths. A cache or lock
// Observer counts events in a table of its own (an array index and an
// atomic add, without allocating; hits in counters striped over cache
// lines, as package cache counts them) that the meter reads when it
// collects,
// so stampede.cache.events and stampede.lock.events are observable
// (asynchronous) counters; the attribute sets of the histograms are built
// when the Observer is made. Spans are made only for loads, waits,
// obtains and renders, never for hits. See BenchmarkObserver and
// BenchmarkNearHit.
package stampedeotel
