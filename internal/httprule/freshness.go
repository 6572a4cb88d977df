package httprule

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// This file holds the times of a stored response: its age when received,
// its freshness lifetime (explicit, heuristic or the policy's TTL), its
// stale window and its grace.

// freshness is the lifetime of resp, with Cache-Control cc and
// Surrogate-Control sc (parsed only with SurrogateControl); heuristic
// says it came from Policy.Heuristic. reason is set if it may not be
// stored for want of one.
func freshness(resp *Response, p *Policy, cc, sc cacheControl) (lifetime time.Duration, heuristic bool, reason string) {
	h := resp.Header
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
		if lifetime = expiresIn(h, resp.Responded); lifetime <= 0 {
			return 0, false, "Expires is not in the future"
		}
		return lifetime, false, ""
	}
	// No explicit freshness: RFC 9111 4.2.2's heuristic where it applies,
	// else TTL (the application's own default), or with Explicit
	// nothing.
	if lifetime, heuristic = p.heuristic(resp.Status, cc.public, h, resp.Responded); heuristic {
		return lifetime, true, ""
	}
	if p.Explicit {
		return 0, false, "no explicit freshness (s-maxage, max-age, Expires)"
	}
	return p.TTL, false, ""
}

// staleWindow is how long past its freshness a response with
// Cache-Control cc, fresh for fresh more when received, may be served
// stale while one render refreshes it: its own stale-while-revalidate,
// else Policy.Stale; none with must-revalidate or proxy-revalidate.
// Its stale-if-error is no part of it: that lets it answer only when the
// refresh fails (RFC 5861 4, RFC 9111 4.2.4), see grace.
func staleWindow(cc cacheControl, p *Policy, fresh time.Duration) time.Duration {
	stale := p.Stale
	if cc.staleWhileRevalidate > 0 || cc.hasSMaxAge {
		// RFC 9111 5.2.2.10: s-maxage implies proxy-revalidate, so
		// Policy.Stale (this cache's own leave to serve stale) does not
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

// grace is how long a response with Cache-Control cc is kept past its
// stale window to answer in place of a failed render: its own
// stale-if-error (RFC 5861 4), or Policy.StaleIfError, whichever is
// longer; 0 when its directives forbid serving it stale (s-maxage
// forbids this cache's own leave, not the response's).
func grace(cc cacheControl, p *Policy) time.Duration {
	if cc.mustRevalidate || cc.proxyRevalidate || cc.noCache {
		return 0
	}
	g := cc.staleIfError
	if !cc.hasSMaxAge {
		g = max(g, p.StaleIfError)
	}
	return g
}

// heuristicallyCacheable reports whether RFC 9110 15.1 lets a cache
// give a response with this status heuristic freshness.
func heuristicallyCacheable(code int) bool {
	switch code {
	case 200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501:
		return true
	}
	return false
}

// heuristic is the freshness lifetime Policy.Heuristic gives a response
// with this status, public directive and header (canonical), received at
// responded; ok is false if the heuristic does not apply to it (off, a
// status it does not cover, no valid Last-Modified, or one later than
// the response's Date).
func (p *Policy) heuristic(status int, public bool, h http.Header, responded time.Time) (lifetime time.Duration, ok bool) {
	if p.Heuristic <= 0 || !public && !heuristicallyCacheable(status) {
		return 0, false
	}
	lm, ok := httpDate(h.Values("Last-Modified"))
	if !ok {
		return 0, false
	}
	at := responded
	if date, ok := httpDate(h.Values("Date")); ok {
		at = date
	}
	since := at.Sub(lm) // saturates: Sub never overflows
	if since < 0 {
		return 0, false // modified after it was sent: RFC 9110 8.8.2.1
	}
	limit := p.HeuristicMaxAge
	if limit == 0 {
		limit = 24 * time.Hour
	}
	// Compared in float64 before converting: since may be near
	// math.MaxInt64 (dates centuries apart), which float64 rounds up to
	// 2^63, past what a Duration holds.
	if f := float64(since) * p.Heuristic; f < float64(limit) {
		return time.Duration(f), true
	}
	return limit, true
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

// expiresIn is the freshness lifetime an Expires field gives a response
// (RFC 9111 4.2.1): Expires less the response's Date, or less when it was
// received (responded) if it has no valid Date. (The time since its Date
// counts in its age, see InitialAge.) An invalid Expires (such as "0"),
// or several that disagree, means already expired: zero or less is
// returned. h must be canonical.
func expiresIn(h http.Header, responded time.Time) time.Duration {
	expires, ok := httpDate(h.Values("Expires"))
	if !ok {
		return 0
	}
	from := responded
	if date, ok := httpDate(h.Values("Date")); ok {
		from = date
	}
	return expires.Sub(from)
}

// httpDate parses a field that holds one HTTP-date; ok is false if any of
// its values is not one, or they differ.
func httpDate(values []string) (t time.Time, ok bool) {
	for i, v := range values {
		d, ok := parseHTTPDate(v)
		if !ok || i > 0 && !d.Equal(t) {
			return time.Time{}, false
		}
		t = d
	}
	return t, len(values) > 0
}

// parseHTTPDate parses an HTTP-date in one of the three forms RFC 9110
// 5.6.7 has recipients accept: IMF-fixdate ("Sun, 06 Nov 1994 08:49:37
// GMT"), rfc850-date ("Sunday, 06-Nov-94 08:49:37 GMT") and asctime
// ("Sun Nov  6 08:49:37 1994"), each with its exact spacing and two-digit
// hours, minutes and seconds; the names in any letter case. http.ParseTime alone is laxer (Go's time
// parsing takes a run of spaces for one, and a one-digit hour), and a
// date a cache reads other than its sender meant is a freshness nobody
// gave.
func parseHTTPDate(v string) (time.Time, bool) {
	v = strings.Trim(v, " \t")
	var clock int // where hh:mm:ss starts
	switch i := strings.IndexByte(v, ','); {
	case i == 3 && len(v) == 29 && v[4] == ' ' && v[7] == ' ' && v[11] == ' ' && v[16] == ' ' && v[25] == ' ':
		clock = 17 // IMF-fixdate
	case i > 3 && len(v) == i+24 && v[i+1] == ' ' && v[i+4] == '-' && v[i+8] == '-' && v[i+11] == ' ' && v[i+20] == ' ':
		clock = i + 12 // rfc850-date
	case i < 0 && len(v) == 24 && v[3] == ' ' && v[7] == ' ' && v[10] == ' ' && v[19] == ' ' && (v[8] == ' ' || isDigit(v[8])) && isDigit(v[9]):
		clock = 11 // asctime-date
	default:
		return time.Time{}, false
	}
	c := v[clock : clock+8]
	if c[2] != ':' || c[5] != ':' || !isDigit(c[0]) || !isDigit(c[1]) || !isDigit(c[3]) || !isDigit(c[4]) || !isDigit(c[6]) || !isDigit(c[7]) {
		return time.Time{}, false
	}
	if clock != 11 && v[len(v)-3:] != "GMT" && strings.EqualFold(v[len(v)-3:], "GMT") {
		// Names in any letter case, as http.ParseTime reads the day's
		// and the month's.
		v = v[:len(v)-3] + "GMT"
	}
	t, err := http.ParseTime(v)
	return t, err == nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
