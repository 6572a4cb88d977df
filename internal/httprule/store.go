package httprule

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// Store applies the rules of a shared cache (RFC 9111 section 3) and the
// policy p to a complete response, and says whether it may be stored
// and, if so, its age when received, its freshness lifetime, stale
// window and grace. The rules run in a fixed order, family by family
// (status, directives, sharing, form and size, then Surrogate-Control,
// the lifetime and the stale window), and the first that refuses gives
// the reason, so that a response several refuse gets the same reason
// every time. It reads resp and p and changes neither.
func Store(resp *Response, p *Policy) Verdict {
	h := resp.Header
	cc := control(h, p)
	if reason := refusal(resp, p, cc); reason != "" {
		return Verdict{Reason: reason}
	}
	var sc cacheControl
	if p.SurrogateControl && !cc.targeted && h["Surrogate-Control"] != nil {
		if sc = parseSurrogateControl(h["Surrogate-Control"]); sc.noStore {
			return Verdict{Reason: "Surrogate-Control: no-store"}
		}
	}
	age := initialAge(h, resp.Requested, resp.Responded)
	if cc.noCache {
		// RevalidateNoCache: stored to be revalidated on every use, so
		// never fresh and without a stale window or grace.
		return Verdict{Age: age}
	}
	lifetime, heuristic, reason := freshness(resp, p, cc, sc)
	switch {
	case reason != "":
		return Verdict{Reason: reason}
	case heuristic && lifetime <= age:
		return Verdict{Reason: "heuristic freshness (from Last-Modified) has passed"}
	case lifetime <= 0:
		return Verdict{Reason: "max-age=0"}
	case lifetime <= age:
		return Verdict{Reason: "stale when received (Age or Date)"}
	}
	return Verdict{Age: age, Lifetime: lifetime, Stale: staleWindow(cc, p, lifetime-age), Grace: grace(cc, p)}
}

// refusal is the first rule that keeps resp (with Cache-Control cc) out
// of a shared cache, by status, by directive, because it is not to be
// shared, by its form, or by its size; "" if none does.
func refusal(resp *Response, p *Policy, cc cacheControl) string {
	h := resp.Header
	if reason := statusRefusal(resp.Status, h, p); reason != "" {
		return reason
	}
	if reason := directiveRefusal(resp.Status, h, p, cc); reason != "" {
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
	case p.MaxSize > 0 && resp.Size > p.MaxSize:
		return "larger than the cache's MaxValueSize"
	}
	return ""
}

// statusRefusal says why a response with this status (and header h, for
// ShouldCache) may not be stored, or "". ShouldCache is asked only for a
// status the shared cache's own rules do not refuse.
func statusRefusal(status int, h http.Header, p *Policy) string {
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
	case p.ShouldCache != nil && !p.ShouldCache(status, h):
		return "ShouldCache said no"
	case p.ShouldCache == nil && !p.StatusOK(status):
		return fmt.Sprintf("status %d", status)
	}
	return ""
}

// directiveRefusal says which of the Cache-Control directives cc of a
// response (with this status and header h) keeps it out of the cache,
// or "".
func directiveRefusal(status int, h http.Header, p *Policy, cc cacheControl) string {
	switch {
	case cc.mustUnderstand && http.StatusText(status) == "":
		// RFC 9111 5.2.2.3: a status this cache does not know (as
		// net/http does not) must not be stored.
		return fmt.Sprintf("must-understand with unknown status %d", status)
	case cc.storeForbidden(status):
		return "no-store"
	case cc.private:
		return "private"
	case cc.noCache && !p.revalidatesNoCache(h):
		return "no-cache (would need revalidation)"
	}
	return ""
}

// sharingRefusal says why a response with header h belongs to its own
// client only, or "": it sets a cookie, carries trailers or varies on
// everything.
func sharingRefusal(h http.Header) string {
	_, star := ParseVary(h)
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

// Ends reports whether a response with this status and header h
// (canonical), which may not be stored, also ends the stored response
// that its render refreshed: the origin now says the resource is not to
// be shared (no-store, private, a cookie, Vary: *), so what was stored
// must not be served again, stale or not. A server error does not:
// serving stale through errors is what stale-if-error is for.
func Ends(status int, h http.Header, p *Policy) bool {
	if status >= 500 {
		return false
	}
	cc := control(h, p)
	_, star := ParseVary(h)
	return cc.storeForbidden(status) || cc.private || len(h.Values("Set-Cookie")) > 0 || star
}

// CompleteBody reports whether a body of n bytes is as long as the
// Content-Length of h (canonical) says, as net/http reads it: the first
// value, if it is a non-negative integer (net/http drops any other, and
// the body is then as long as it is). Values that disagree leave the
// length unknown, which is not complete either. RFC 9111 3.4: an
// incomplete response is not stored as a complete one.
func CompleteBody(h http.Header, n int) bool {
	vs := h["Content-Length"]
	if len(vs) == 0 {
		return true
	}
	for _, v := range vs[1:] {
		if v != vs[0] {
			return false
		}
	}
	declared, err := strconv.ParseInt(vs[0], 10, 64)
	return err != nil || declared < 0 || declared == int64(n)
}
