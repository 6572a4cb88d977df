package middleware

import (
	"net/http"
	"slices"
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
