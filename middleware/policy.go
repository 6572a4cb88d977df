package middleware

import (
	"net/http"
	"slices"
	"time"

	"github.com/hotkv/stampede/internal/httprule"
)

// This file holds the storage policy: which requests may use the cache
// (bypass) and which responses may be stored (storable, which asks the
// rules of httprule), each refusal with its reason.

// bypass says why r must not use the cache, or "".
//
// A field may come on several lines, and the handler sees every one
// (r.Cookie reads them all; a framework may read the last): each check
// looks at every line, and any non-empty one counts. An empty first
// "Cookie:" line must not make a request with a session look anonymous.
func (m *Middleware) bypass(r *http.Request) string {
	h := r.Header
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		return "method"
	case present(h, "Authorization"):
		return "authorization"
	case present(h, "Cookie") && !m.o.CacheRequestsWithCookies:
		return "cookie"
	case present(h, "Range") && r.Method != http.MethodGet:
		// Range is defined for GET only; a HEAD with one goes to the
		// handler as before. A GET with one gets its range of the response (range.go).
		return "range on HEAD"
	case present(h, "Upgrade"):
		return "upgrade"
	case r.ContentLength != 0 || len(r.TransferEncoding) > 0:
		// A body is no part of the key, and the render for the cache gets
		// none (see prepareRender); a GET or HEAD that sends one is served
		// by next as it is, with its body, and shares nothing.
		return "request body"
	case r.URL.Opaque != "" || r.URL.User != nil:
		// "GET http:x" and user information: see baseKey.
		return "opaque or user-info target"
	case slices.ContainsFunc(h["Cache-Control"], func(v string) bool { return containsASCIIFold(v, "no-store") }):
		return "no-store"
	}
	return ""
}

// storable applies the storage rules (httprule.Store) to a response
// recorded in rec, rendered for r at requested and received at
// responded, and returns their verdict: why it may not be stored, or its
// age, lifetime, stale window and grace.
//
// It first merges header fields the handler set in another letter case
// than the canonical one (w.Header()["set-cookie"]) into rec's canonical
// names, so that the rules and the header drops of storedHeader see
// them.
func (m *Middleware) storable(r *http.Request, rec *recorder, requested, responded time.Time) httprule.Verdict {
	canonicalHeader(rec.header)
	return httprule.Store(&httprule.Response{
		Status: rec.status, Header: rec.header,
		Requested: requested, Responded: responded,
		Size: storedSize(r, rec),
	}, &m.rules)
}

// flushRefusal says why the response rec records for r cannot be
// stored, judged as the storage rules (storable) judge it at the end
// of the render, on its status and header as they stand now, or "". It
// is rec.refuses for a render (see run). The body so far counts towards
// the size limits; the rules that need the whole body or the render's
// end (an incomplete body, the request ending) are left to the end.
func (m *Middleware) flushRefusal(r *http.Request, rec *recorder) string {
	h := rec.header
	defer func() { rec.header = h }()
	rec.header = h.Clone() // storable merges the letter cases of the names
	now := m.now()
	return m.storable(r, rec, now, now).Reason
}
