package httprule

import (
	"net/http"
	"slices"
	"time"
)

// Policy is what the rules of this package take from a cache's
// configuration, as plain values: the middleware builds one from its
// Options when it is made. The zero Policy stores the default statuses,
// fresh for no time at all, and obeys no targeted field. A Policy is
// read-only once made, and then safe for concurrent use.
type Policy struct {
	// Statuses are the statuses that may be stored; empty means the
	// default list (see StatusOK), or with Explicit any final status
	// but 206 and the server errors other than 501.
	Statuses []int

	// ShouldCache, if set, decides instead of Statuses whether a
	// response with this status and header may be stored; the rules of a
	// shared cache apply either way.
	ShouldCache func(status int, header http.Header) bool

	// SurrogateControl honours the Surrogate-Control field: its max-age
	// comes first of the freshness lifetimes, and its no-store refuses.
	SurrogateControl bool

	// Targeted names the targeted fields (RFC 9213) obeyed, in order of
	// precedence; the first valid one replaces Cache-Control, Expires,
	// Pragma and Surrogate-Control.
	Targeted []string

	// TTL is the freshness lifetime of a response that says none, when
	// the heuristic gives it none either and Explicit is off.
	TTL time.Duration

	// Explicit stores only responses that say how long they are fresh
	// (or to which Heuristic gives a lifetime).
	Explicit bool

	// Heuristic is the fraction of the time since Last-Modified that a
	// response without explicit freshness is fresh (RFC 9111 4.2.2);
	// 0 turns the heuristic off.
	Heuristic float64

	// HeuristicMaxAge caps the lifetime Heuristic gives; 0 means 24
	// hours.
	HeuristicMaxAge time.Duration

	// Stale is the stale window of a response whose Cache-Control names
	// none (no stale-while-revalidate).
	Stale time.Duration

	// StaleIfError is the cache's own grace: how long past its stale
	// window a response may answer in place of a failed render.
	StaleIfError time.Duration

	// Revalidate is how long a response with a validator is kept past
	// its stale window to be revalidated; 0 means as long as it is fresh,
	// between 1 minute and 1 hour; negative turns revalidation off.
	Revalidate time.Duration

	// RevalidateNoCache stores no-cache responses that have a validator,
	// to be revalidated on every use (while Revalidate is not negative).
	RevalidateNoCache bool

	// MaxSize is the largest stored value, in bytes, a response may
	// make (the cache's MaxValueSize); 0 means no limit.
	MaxSize int
}

// defaultStatuses are the statuses stored when Policy.Statuses is empty
// and Policy.Explicit is off. Read-only.
var defaultStatuses = [...]int{200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501}

// StatusOK reports whether p lets a response with this status be stored,
// by Statuses, else by Explicit, else by the default list. ShouldCache,
// when set, is asked instead (see Store).
func (p *Policy) StatusOK(code int) bool {
	switch {
	case len(p.Statuses) > 0:
		return slices.Contains(p.Statuses, code)
	case p.Explicit:
		// A response that says how long it is fresh may be stored
		// whatever its final status (RFC 9111 3), but a partial one
		// (206: range requests bypass the cache) and a server error.
		return code >= 200 && code != http.StatusPartialContent && (code < 500 || code == http.StatusNotImplemented)
	}
	return slices.Contains(defaultStatuses[:], code)
}

// Keep is how long a stored response with this freshness lifetime is
// kept past its stale window to be revalidated (see Policy.Revalidate):
// 0 if it has no validator of the handler's (validators false) or
// revalidation is off.
func (p *Policy) Keep(lifetime time.Duration, validators bool) time.Duration {
	switch {
	case p.Revalidate < 0 || !validators:
		return 0
	case p.Revalidate > 0:
		return p.Revalidate
	}
	return min(max(lifetime, time.Minute), time.Hour)
}

// revalidatesNoCache reports whether a response with Cache-Control
// no-cache and header h (canonical) is stored, to be revalidated on every
// use: with RevalidateNoCache (and revalidation on), when it has an ETag
// or Last-Modified.
func (p *Policy) revalidatesNoCache(h http.Header) bool {
	return p.RevalidateNoCache && p.Revalidate >= 0 && (h["Etag"] != nil || h["Last-Modified"] != nil)
}
