package middleware

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"
)

// This file holds the storage policy: which requests may use the cache
// (bypass) and which responses may be stored (storable), each refusal
// with its reason.

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

// clientNoCache reports whether r's Cache-Control or Pragma, on any of
// their lines, says no-cache.
func clientNoCache(r *http.Request) bool {
	cc := parseCacheControl(r.Header["Cache-Control"])
	return cc.noCache || pragmaNoCache(r.Header["Pragma"])
}

// errNotStored is the loader's error for a response that must not be
// stored or shared; every other waiter renders for itself.
type errNotStored struct{ reason string }

func (e errNotStored) Error() string { return "middleware: response not stored: " + e.reason }

// storable applies the rules of a shared cache (RFC 9111 section 3) and
// the options to a recorded response, rendered for a request made at
// requested and received at responded. It returns why it may not be
// stored, or its age when received and its freshness lifetime (counted
// from when its age was 0) and stale window.
//
// It first merges header fields the handler set in another letter case
// than the canonical one (w.Header()["set-cookie"]) into rec's canonical
// names, so that these rules and the header drops of storedHeader see
// them. The rules run in a fixed order, family by family (refusal, then
// Surrogate-Control, the lifetime and the stale window), and the
// first that refuses gives the reason.
func (m *Middleware) storable(r *http.Request, rec *recorder, requested, responded time.Time) (reason string, age, lifetime, stale time.Duration) {
	canonicalHeader(rec.header)
	h := rec.header
	cc := m.responseControl(h)
	if reason := m.refusal(r, rec, cc); reason != "" {
		return reason, 0, 0, 0
	}
	var sc cacheControl
	if m.o.SurrogateControl && !cc.targeted && h["Surrogate-Control"] != nil {
		if sc = parseSurrogateControl(h["Surrogate-Control"]); sc.noStore {
			return "Surrogate-Control: no-store", 0, 0, 0
		}
	}
	age = initialAge(h, requested, responded)
	if cc.noCache {
		// RevalidateNoCache: stored to be revalidated on every use, so
		// never fresh and without a stale window (see revalidate.go).
		return "", age, 0, 0
	}
	lifetime, heuristic, reason := m.freshness(rec.status, h, cc, sc, responded)
	switch {
	case reason != "":
		return reason, 0, 0, 0
	case heuristic && lifetime <= age:
		return "heuristic freshness (from Last-Modified) has passed", 0, 0, 0
	case lifetime <= 0:
		return "max-age=0", 0, 0, 0
	case lifetime <= age:
		return "stale when received (Age or Date)", 0, 0, 0
	}
	return "", age, lifetime, m.staleWindow(cc, lifetime-age)
}

// refusal is the first rule that keeps rec (with Cache-Control cc) out
// of a shared cache, by status, by directive, because it is not to be
// shared, by its form, or by its size; "" if none does. The families are
// asked in this order, so that a response several refuse gets the same
// reason every time.
func (m *Middleware) refusal(r *http.Request, rec *recorder, cc cacheControl) string {
	h := rec.header
	if reason := m.statusRefusal(rec.status, h); reason != "" {
		return reason
	}
	if reason := m.directiveRefusal(rec.status, h, cc); reason != "" {
		return reason
	}
	if reason := sharingRefusal(h); reason != "" {
		return reason
	}
	switch {
	case cc.broken:
		return "malformed Cache-Control"
	case !cc.targeted && h["Cache-Control"] == nil && pragmaNoCache(h.Values("Pragma")):
		// HTTP/1.0 origins say Cache-Control: no-cache this way. RFC
		// 9111 5.4 leaves Pragma in responses undefined; where there is
		// no Cache-Control to say otherwise, take it at its word.
		return "Pragma: no-cache"
	case storedSize(r, rec) > m.maxValue:
		return "larger than the cache's MaxValueSize"
	}
	return ""
}

// statusRefusal says why a response with this status (and header h, for
// ShouldCache) may not be stored, or "". ShouldCache is asked only for a
// status the shared cache's own rules do not refuse.
func (m *Middleware) statusRefusal(status int, h http.Header) string {
	switch {
	case status >= 500 && status != http.StatusNotImplemented:
		return "server error"
	case status == http.StatusNotModified || status == http.StatusPreconditionFailed:
		// Answers to this request's conditions, not a response that other
		// requests (without them) may be given.
		return fmt.Sprintf("status %d answers the request's conditions", status)
	case status == http.StatusPartialContent:
		// A part of a response, never one for other requests, whatever
		// Statuses or ShouldCache say.
		return "status 206 (a partial response)"
	case m.o.ShouldCache != nil && !m.o.ShouldCache(status, h):
		return "ShouldCache said no"
	case m.o.ShouldCache == nil && !m.o.statusOK(status):
		return fmt.Sprintf("status %d", status)
	}
	return ""
}

// directiveRefusal says which of the Cache-Control directives cc of a
// response (with this status and header h) keeps it out of the cache,
// or "".
func (m *Middleware) directiveRefusal(status int, h http.Header, cc cacheControl) string {
	switch {
	case cc.mustUnderstand && http.StatusText(status) == "":
		// RFC 9111 5.2.2.3: a status this cache does not know (as
		// net/http does not) must not be stored.
		return fmt.Sprintf("must-understand with unknown status %d", status)
	case cc.storeForbidden(status):
		return "no-store"
	case cc.private:
		return "private"
	case cc.noCache && !m.revalidatesNoCache(h):
		return "no-cache (would need revalidation)"
	}
	return ""
}

// sharingRefusal says why a response with header h belongs to its own
// client only, or "": it sets a cookie, carries trailers or varies on
// everything.
func sharingRefusal(h http.Header) string {
	_, star := parseVary(h)
	switch {
	case len(h.Values("Set-Cookie")) > 0:
		return "sets a cookie"
	case hasTrailers(h):
		// Trailers are sent after the body, where none of these rules
		// would see them (a "Trailer:Set-Cookie" is a cookie too).
		return "declares or sets trailers"
	case star:
		return "Vary: *"
	}
	return ""
}

// freshness is the lifetime of a response with this status,
// header h, Cache-Control cc and Surrogate-Control sc (parsed only with
// SurrogateControl), received at responded; heuristic says it came from
// Freshness.Heuristic. reason is set if it may not be stored for want of
// one.
func (m *Middleware) freshness(status int, h http.Header, cc, sc cacheControl, responded time.Time) (lifetime time.Duration, heuristic bool, reason string) {
	switch {
	case sc.hasMaxAge:
		// Addressed to surrogates, this cache among them: it comes
		// before everything Cache-Control and Expires say of freshness
		// (never before what they say of storing: no-store, private).
		return sc.maxAge, false, ""
	case cc.hasSMaxAge:
		return cc.sMaxAge, false, ""
	case cc.hasMaxAge:
		return cc.maxAge, false, ""
	case h["Expires"] != nil && !cc.targeted:
		// RFC 9111 4.2.1, 5.3: Expires counts only without s-maxage and
		// max-age; an invalid one means already expired. RFC 9213 2.1:
		// a targeted field in use replaces it too.
		if lifetime = expiresIn(h, responded); lifetime <= 0 {
			return 0, false, "Expires is not in the future"
		}
		return lifetime, false, ""
	}
	// No explicit freshness: RFC 9111 4.2.2's heuristic where it applies,
	// else TTL (the application's own default), or with Freshness.Explicit
	// nothing.
	if lifetime, heuristic = m.o.heuristic(status, cc.public, h, responded); heuristic {
		return lifetime, true, ""
	}
	if m.o.Freshness.Explicit {
		return 0, false, "no explicit freshness (s-maxage, max-age, Expires)"
	}
	return m.o.Freshness.TTL, false, ""
}

// staleWindow is how long past its freshness a response with
// Cache-Control cc, fresh for fresh more when received, may be served
// stale while one render refreshes it: its own stale-while-revalidate,
// else Freshness.Stale; none with must-revalidate or proxy-revalidate.
// Its stale-if-error is no part of it: that lets it answer only when the
// refresh fails (RFC 5861 4, RFC 9111 4.2.4), see graceFor.
func (m *Middleware) staleWindow(cc cacheControl, fresh time.Duration) time.Duration {
	stale := m.o.Freshness.Stale
	if cc.staleWhileRevalidate > 0 || cc.hasSMaxAge {
		// RFC 9111 5.2.2.10: s-maxage implies proxy-revalidate, so
		// Freshness.Stale (this cache's own leave to serve stale) does not
		// apply; the response's own stale-while-revalidate still does, as
		// CDNs honour it with s-maxage.
		stale = cc.staleWhileRevalidate
	}
	if cc.mustRevalidate || cc.proxyRevalidate {
		stale = 0
	}
	// The entry lives fresh+stale: keep that from overflowing when the
	// options are set huge to mean "forever".
	return min(stale, math.MaxInt64-fresh)
}

// initialAge is the age of a response when it was received
// (responded), for a request made at requested: RFC 9111 4.2.3's
// corrected_initial_age, the larger of its apparent age (responded less
// its Date, if it has a valid one) and its Age field (see parseAge) plus
// the response delay.
func initialAge(h http.Header, requested, responded time.Time) time.Duration {
	received, _ := parseAge(h["Age"])
	age := received + max(0, responded.Sub(requested))
	if date, ok := httpDate(h.Values("Date")); ok {
		age = max(age, responded.Sub(date))
	}
	return max(age, 0)
}

// parseAge parses the field lines of an Age field as RFC 9111 5.1 says:
// the first member of the first line counts (a list, or several lines,
// come from a sender that appended rather than replaced), it must be
// delta-seconds (digits only, capped at 2^31 seconds as RFC 9111 1.2.2
// says), and an invalid one is ignored (ok false, age 0): a sign, a
// fraction, a word. Parameters after the digits ("7200;x=y", which
// delta-seconds does not allow) are dropped and the digits kept: the
// older reading is the safer one. An ignored Age leaves the response its
// apparent age, from Date, which a cache on the way keeps as the origin
// sent it (see initialAge).
func parseAge(lines []string) (age time.Duration, ok bool) {
	if len(lines) == 0 {
		return 0, false
	}
	v := lines[0]
	if i := strings.IndexByte(v, ','); i >= 0 {
		v = v[:i]
	}
	v = strings.Trim(v, " \t")
	if i := strings.IndexByte(v, ';'); i > 0 {
		v = strings.TrimRight(v[:i], " \t")
	}
	if v == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n < 1<<31 {
			n = n*10 + int64(c-'0')
		}
	}
	return time.Duration(min(n, 1<<31)) * time.Second, true
}

// hasTrailers reports whether a response header declares trailers
// (Trailer) or sets one the way net/http allows without declaring it (a
// name with http.TrailerPrefix, in any letter case).
func hasTrailers(h http.Header) bool {
	if len(h["Trailer"]) > 0 {
		return true
	}
	for k := range h {
		if len(k) >= len(http.TrailerPrefix) && strings.EqualFold(k[:len(http.TrailerPrefix)], http.TrailerPrefix) {
			return true
		}
	}
	return false
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}
