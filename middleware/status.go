package middleware

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// status is what a response says of how the middleware answered it: the
// status header (Options.StatusHeader) and Cache-Status (RFC 9211).
type status struct {
	x         string // the status header: HIT, STALE, MISS or BYPASS
	fwd       string // Cache-Status fwd; "" for a hit
	fwdStatus int    // the status of the render that answered, if this request's
	stored    bool   // the render that answered is stored
	collapsed bool   // answered by another request's render
	detail    string // a token
}

// The status header's values, and the statuses that need nothing more.
var (
	statusHit = status{x: "HIT"}
	// statusStale is a stored response served stale while one render
	// refreshes it: a hit (this request was not forwarded), its ttl
	// negative.
	statusStale  = status{x: "STALE"}
	statusBypass = status{x: "BYPASS", fwd: "bypass"}
)

// missStatus is the status of a response that this request's render
// made, forwarded for fwd, with the render's status code.
func missStatus(fwd string, code int, stored bool) status {
	return status{x: "MISS", fwd: fwd, fwdStatus: code, stored: stored}
}

// collapsedStatus is the status of a response that another request's
// render made, while this one, forwarded for fwd, waited for it.
func collapsedStatus(fwd string) status { return status{x: "HIT", fwd: fwd, collapsed: true} }

// graceStatus is the status of a stored response served in place of a
// render that failed (Freshness.StaleIfError) with code (0: unknown, in
// another process).
func graceStatus(code int) status {
	return status{x: "STALE", fwd: "stale", fwdStatus: code, detail: "stale-if-error"}
}

// bypassStatus is the status of a request the cache did not handle, for
// reason (see bypass): fwd=method for a method the cache never answers,
// otherwise fwd=bypass with the reason as a detail.
func bypassStatus(reason string) status {
	if reason == "method" {
		return status{x: "BYPASS", fwd: "method"}
	}
	return status{x: "BYPASS", fwd: "bypass", detail: bypassDetails[reason]}
}

// bypassDetails are the Cache-Status details of bypass's reasons.
var bypassDetails = map[string]string{
	"authorization":              "authorization",
	"cookie":                     "cookie",
	"range on HEAD":              "range-on-head",
	"upgrade":                    "upgrade",
	"request body":               "request-body",
	"opaque or user-info target": "target",
	"no-store":                   "request-no-store",
	"no key for the request":     "no-key",
}

// cacheStatus is st's Cache-Status value, with the ttl of resp (its
// remaining freshness lifetime at now, in whole seconds, negative once
// stale) when it is set.
func (st status) cacheStatus(resp *response, now time.Time) string {
	if st.fwd == "" && resp == nil {
		return "stampede; hit"
	}
	b := make([]byte, 0, 80)
	b = append(b, "stampede"...)
	if st.fwd == "" {
		b = append(b, "; hit"...)
	} else {
		b = append(b, "; fwd="...)
		b = append(b, st.fwd...)
		if st.fwdStatus != 0 {
			b = append(b, "; fwd-status="...)
			b = strconv.AppendInt(b, int64(st.fwdStatus), 10)
		}
	}
	if st.stored {
		b = append(b, "; stored"...)
	}
	if st.collapsed {
		b = append(b, "; collapsed"...)
	}
	if resp != nil && resp.FreshUntil > resp.Stored {
		// Floor division: a response 0.5s past its freshness has a ttl
		// of -1, never 0, which would say it is fresh.
		ms := resp.FreshUntil - now.UnixMilli()
		ttl := ms / 1000
		if ms < 0 && ms%1000 != 0 {
			ttl--
		}
		if st.x == "STALE" && ttl >= 0 {
			// Served stale within its own lifetime: a soft purge made it
			// stale (see softpurge.go). Stale is what the ttl says.
			ttl = -1
		}
		b = append(b, "; ttl="...)
		b = strconv.AppendInt(b, ttl, 10)
	}
	if st.detail != "" {
		b = append(b, "; detail="...)
		b = append(b, st.detail...)
	}
	return string(b)
}

// appendMember returns the Cache-Status list of fields (one or more
// field lines, which are one list: RFC 9110 5.3) with member after its
// members, on one line. A member equal to member is left out: the
// middleware's own, copied through by the handler, is not repeated.
func appendMember(fields []string, member string) string {
	var b strings.Builder
	for _, f := range fields {
		for f != "" {
			var m string
			m, f = nextMember(f)
			if m = strings.TrimSpace(m); m != "" && m != member {
				b.WriteString(m)
				b.WriteString(", ")
			}
		}
	}
	b.WriteString(member)
	return b.String()
}

// nextMember cuts the first member off a list field: up to the first
// comma outside a quoted string (RFC 8941 3.3.3, with backslash escapes).
func nextMember(f string) (member, rest string) {
	quoted := false
	for i := 0; i < len(f); i++ {
		switch c := f[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			return f[:i], f[i+1:]
		}
	}
	return f, ""
}

// mergeField moves the values of name (canonical) set in h under other
// letter cases (w.Header()["cache-status"]) under name, after its own:
// net/http would send them as separate fields.
func mergeField(h http.Header, name string) {
	for k, vs := range h {
		if k != name && len(k) == len(name) && strings.EqualFold(k, name) {
			h[name] = append(h[name], vs...)
			delete(h, k)
		}
	}
}
