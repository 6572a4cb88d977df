// Package obs holds what stampedeprom and stampedeotel share, apart from
// the metrics backend: which cache.Stats fields they export and how,
// the bounded set of routes a MiddlewareObserver labels, and the table
// that counts a cache's or lock's Events in place until collection.
//
// It imports neither Prometheus nor OpenTelemetry: each module maps these
// tables onto its own series, names and labels.
package obs
