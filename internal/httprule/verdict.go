package httprule

import (
	"net/http"
	"time"
)

// This file holds what Store takes and gives: a complete response, and
// the verdict on it.

// Response is a complete recorded response, as Store judges it.
type Response struct {
	// Status is the response's final status.
	Status int

	// Header is the response's header, in canonical form (the caller
	// merges names a handler set in another letter case first). Store
	// only reads it.
	Header http.Header

	// Requested is when the request that made the response was sent,
	// and Responded when the response was received.
	Requested, Responded time.Time

	// Size is how many bytes the stored value would take (body, header
	// fields and framing), for Policy.MaxSize.
	Size int
}

// Verdict is what Store says of a response: why it may not be stored, or
// the times it is stored with.
type Verdict struct {
	// Reason says why the response may not be stored; "" if it may.
	Reason string

	// Age is the response's age when it was received (RFC 9111 4.2.3).
	Age time.Duration

	// Lifetime is its freshness lifetime, counted from when its age was
	// 0; 0 for a no-cache response stored to be revalidated on every
	// use.
	Lifetime time.Duration

	// Stale is how long past its freshness it may be served stale while
	// one render refreshes it (see staleWindow).
	Stale time.Duration

	// Grace is how long past its stale window it may answer in place of
	// a render that fails (see grace).
	Grace time.Duration
}
