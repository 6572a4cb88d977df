// Package stampedeotel reports what packages cache, lock and middleware
// observe as OpenTelemetry metrics (go.opentelemetry.io/otel/metric) and
// spans (go.opentelemetry.io/otel/trace).
//
// It is built on the packages' hooks: an Observer function per Cache, lock
// Client and Middleware records each Event, and CacheStats reads
// (*cache.Cache).Stats at every collection for the values no Event carries
// (coalesced calls, calls a load answered, rebuild-lock contention, the
// near cache's size).
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
// ctx, the request's. Failures set the span's status to Error and the
// attribute error.type.
//
// A loader wrapped with Traced has a span of its own, named as you like,
// in the same place; under a Cache observed by the same Telemetry's
// CacheObserver that span is the load's only one (see Traced).
//
// # Attributes
//
// The stampede.event attribute is the EventKind's String ("hit",
// "not-obtained", "bypass", ...), so kinds added to the packages later are
// recorded under their own names without a change here. No attribute
// holds a cache or lock key or a URL unless Options.SpanKeys puts the key
// on spans: keys are unbounded and may be private.
//
// Attributes of the OpenTelemetry semantic conventions keep their names
// there (the meter's and tracer's schema URL says which version):
//
//   - error.type, on the span and the duration's data point of every
//     failure (a load that failed, not-found being an answer; a wait that
//     timed out or learnt of a failed load; an Obtain whose server call
//     failed; a request that failed or was answered 5xx): a known
//     condition by a short name (timeout, canceled, panic, remote_load,
//     permission, value_too_large, closed, lost, not_held,
//     foreign_value), else the name an error in the chain gives with an
//     ErrorType() string method, else the Go type of the innermost error
//     that fmt.Errorf's %w and errors.Join wrap ("*net.OpError"), and
//     _OTHER past 50 such names (so that series stay bounded); for a 5xx
//     without an error, the status code.
//   - http.route, http.request.method and http.response.status_code on
//     the middleware's metrics and spans. http.route is Event.Route: the
//     route's pattern (chi's, or net/http's ServeMux pattern) or
//     "unknown", never a path; Options.MaxRoutes bounds its distinct
//     values (later ones are "other"). The method is the request's if the
//     conventions know it, else _OTHER (a span then also has
//     http.request.method_original); the status code is absent when no
//     response was sent.
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
// when the Observer is made (a failure's, with its error.type, the first
// time one of that type comes). Spans are made only for loads, waits,
// obtains and renders, never for hits. See BenchmarkObserver and
// BenchmarkNearHit.
package stampedeotel
