package middleware

import (
	"net/http"
	"slices"
	"strings"
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

// present reports whether h has a non-empty line of the field name, in
// canonical form (as r.Cookie and Header.Get look it up), on any of its
// lines. It allocates nothing: the hit path asks for a few every request.
func present(h http.Header, name string) bool {
	for _, v := range h[name] {
		if v != "" {
			return true
		}
	}
	return false
}

// first is h.Get(name) for a name in canonical form, without
// canonicalising it again. It is for response fields and for request
// fields where the first line alone decides nothing a client could turn
// against others; a check that a field is absent uses present.
func first(h http.Header, name string) string {
	if vs := h[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// containsASCIIFold reports whether s contains sub, an ASCII lower-case
// string, in any letter case of ASCII letters. (No other character
// lower-cases to one of the letters of "no-store", which is what it is
// for.)
func containsASCIIFold(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if strings.EqualFold(s[i:i+len(sub)], sub) {
			return true
		}
	}
	return false
}

// errNotStored is the loader's error for a response that must not be
// stored or shared; every other waiter renders for itself.
type errNotStored struct{ reason string }

func (e errNotStored) Error() string { return "middleware: response not stored: " + e.reason }

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

// containsFold reports whether list holds s, in any letter case.
func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}
