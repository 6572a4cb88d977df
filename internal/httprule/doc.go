// Package httprule holds the HTTP caching rules of the middleware as pure
// functions over status, header fields, a Policy and time: what a shared
// cache may store and for how long (RFC 9111, RFC 5861), the
// Cache-Control, targeted (RFC 9213) and Surrogate-Control fields that
// say so, Age, Date, Expires and the heuristic freshness, Vary, Range and
// If-Range, and the rules of revalidation.
//
// Nothing here does I/O, keeps state or reads a clock: every time is
// passed in, and every function is safe for concurrent use. Header
// arguments are read, never changed, and must be in canonical form
// unless a function says otherwise.
//
// # Storage verdict
//
// Store is the one verdict on a complete response: why it may not be
// stored, or its age, freshness lifetime, stale window and grace.
//
//	v := httprule.Store(&httprule.Response{Status: 200, Header: h, Requested: t0, Responded: t1}, &p)
//	if v.Reason != "" {
//		// pass it through, not stored
//	}
package httprule
