// Package metrics holds the part of a metrics adapter for stampede that
// does not depend on the metrics backend: it turns the Events of packages
// cache, lock and middleware and a cache's Stats into series, so that an
// adapter (the modules stampedeprom and stampedeotel are two) only maps
// them onto its own names and labels. It imports no metrics backend.
//
// # Counting in place
//
// An Observer runs on the goroutine that did the work, near-cache hits
// included, which take less time than most backends' counter lookups.
// Events counts each kind in place with an atomic add (cache hits and
// stale hits in counters striped over cache lines) and hands the counts
// to the adapter when its backend collects, so that observing allocates
// nothing and takes a few nanoseconds.
//
// # Bounded labels
//
// Routes keeps the route label of a middleware's series bounded: the
// first routes seen get a series of their own, the others share the
// series of OtherRoute.
//
// # Usage
//
//	events := metrics.NewEvents(cache.EventHit, cache.EventStale)
//	opts := &cache.Options{Observer: func(e cache.Event) { events.Count(e.Kind, e.Near) }}
//	// when the backend collects:
//	events.Each(func(k cache.EventKind, tier metrics.Tier, n uint64) {
//		report(k.String(), tier.String(), n)
//	})
package metrics
