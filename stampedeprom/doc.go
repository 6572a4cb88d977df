// Package stampedeprom exports what packages cache, lock and middleware
// observe as Prometheus metrics (github.com/prometheus/client_golang).
//
// It is built on the packages' hooks and adds no work to them: an
// Observer function per Cache, lock Client and Middleware counts each
// Event, and CacheStats reads (*cache.Cache).Stats at every scrape for the
// values no Event carries (coalesced calls, rebuild-lock contention, the
// near cache's size).
//
//	m, err := stampedeprom.New(prometheus.DefaultRegisterer, nil)
//	c, err := cache.New(rdb, &cache.Options{Observer: m.CacheObserver("users")})
//	err = m.CacheStats("users", c)
//	locks, err := lock.New(rdb, &lock.Options{Observer: m.LockObserver("jobs")})
//	mw, err := middleware.New(c, &middleware.Options{Observer: m.MiddlewareObserver("pages")})
//	http.Handle("/metrics", promhttp.Handler())
//
// An Observer that is already set is kept with Chain:
//
//	Observer: stampedeprom.Chain(myObserver, m.CacheObserver("users"))
//
// # Labels
//
// The event label is the EventKind's String ("hit", "not-obtained",
// "bypass", ...), so kinds added to the packages later are counted under
// their own names without a change here. No label ever holds a cache or
// lock key or a URL: keys are unbounded and may be private. The middleware's
// metrics are labelled by Event.Route, the route's pattern (chi's, or
// net/http's ServeMux pattern where the mux routes to the middleware) or
// "unknown", never a path: Options.MaxRoutes bounds the distinct values
// (later ones count as "other"). The reason label holds the
// middleware's Event.Reason, a short fixed text.
//
// # Cost
//
// Observers run synchronously on the packages' hot paths. A cache
// Observer counts events in a table of its own, read when the Metrics are
// collected (hits in counters striped over cache lines, as package cache
// counts them); every other series a cache or lock Observer can touch is
// resolved when the Observer is made. Counting an event is an array index
// and an atomic add, without allocating; the middleware's series are found
// in a map under a read lock.
// See BenchmarkObserver and BenchmarkNearHit.
package stampedeprom
