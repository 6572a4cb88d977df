package middleware

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/zeebo/xxh3"
)

// response is what the cache stores for a request: everything needed to
// answer it again, and the request header values it was rendered for.
//
// A response read from the cache is read-only: with the cache's near cache
// on (cache.Options.Near) every hit on an entry returns the same decoded
// response, header map, body and Vary slices included, to every request
// it answers, concurrently. write copies what it hands to a
// ResponseWriter; the vary index keeps Vary as it is and only reads it.
type response struct {
	Status     int
	Header     http.Header
	Body       []byte
	Stored     int64    // Unix ms when its age was 0: when rendered, less its age then (see initialAge)
	FreshUntil int64    // Unix ms
	Vary       []string // canonical names from the response's Vary
	VaryValues []string // the rendering request's values of those headers

	// RevalidateFrom is when (Unix ms) the response's stale window ends
	// if it is kept past it to be revalidated (see revalidate.go): from
	// then on it is never served without a conditional render first. 0:
	// not kept (no validator of the handler's), the entry ends with its
	// stale window.
	RevalidateFrom int64
	// GraceUntil is until when (Unix ms) the response may be served past
	// RevalidateFrom when the render that would replace it fails
	// (Freshness.StaleIfError); 0: never.
	GraceUntil int64
	// HandlerETag says the ETag is the handler's, which a revalidation
	// sends as If-None-Match, and not a digest of the body the middleware
	// added (storedHeader).
	HandlerETag bool
	// Tags are the page's tags (Options.Tags) with the epochs of their
	// records its render saw (see tags.go).
	Tags []tagRef
	// Version is random, drawn for each render and each freshening: it
	// names this stored response in its revalidation's key (see
	// revalidate), which two versions never share, whatever their times.
	Version uint64
}

// dropOnStore reports the headers that are not stored: hop-by-hop ones
// describe one connection, not the response (RFC 9110 7.6.1); Age is
// recomputed when serving (from Stored, which counts the Age received).
// Date is kept: it says when the origin made the response (RFC 9110
// 6.6.1).
func dropOnStore(name string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Age", "Set-Cookie":
		return true
	}
	return false
}

// storedHeader copies the end-to-end headers of h and adds an ETag
// derived from the body if the handler set none, and a Date (when the
// response was received, responded) if it has none, as RFC 9110 6.6.1
// asks of a cache. Names are compared, and stored, in canonical form
// (storable has merged h's already).
func storedHeader(h http.Header, body []byte, responded time.Time) http.Header {
	out := make(http.Header, len(h)+1)
	for k, vs := range h {
		if ck := http.CanonicalHeaderKey(k); !dropOnStore(ck) {
			out[ck] = append(out[ck], vs...)
		}
	}
	if out.Get("Etag") == "" {
		out.Set("Etag", `"`+strconv.FormatUint(xxh3.Hash(body), 36)+`"`)
	}
	if out["Date"] == nil {
		out["Date"] = []string{responded.UTC().Format(http.TimeFormat)}
	}
	out.Set("Content-Length", strconv.Itoa(len(body)))
	return out
}

// matches reports whether r has the same values, for the headers resp
// varies on, as the request resp was rendered for.
func (resp *response) matches(r *http.Request) bool {
	if len(resp.Vary) != len(resp.VaryValues) {
		return false
	}
	for i, name := range resp.Vary {
		if headerValue(r.Header, name) != resp.VaryValues[i] {
			return false
		}
	}
	return true
}

// storedSize bounds the size of the value the cache will encode for the
// response rec holds, rendered for r: body, header fields, the rendering
// request's values of the Vary headers, the fields storedHeader adds, and
// the framing (up to 5 bytes a string in Msgpack) and field names of a
// response. rec's header must be canonical.
func storedSize(r *http.Request, rec *recorder) int {
	const perString, fixed = 5, 256
	n := fixed + rec.body.Len() + perString
	for k, vs := range rec.header {
		n += len(k) + 2*perString
		for _, v := range vs {
			n += len(v) + perString
		}
	}
	vary, _ := parseVary(rec.header)
	for _, name := range vary {
		n += 2*(len(name)+perString) + len(headerValue(r.Header, name))
	}
	return n
}

// write answers r with resp, adding Age and the status header. For a 2xx
// response it evaluates r's If-None-Match, or without one its
// If-Modified-Since, against resp and answers 304 when they say the
// client's copy is current (RFC 9110 13.2.2). Other statuses are served
// whole: preconditions apply to 2xx responses only (RFC 9110 13.2.1), so
// "If-None-Match: *" must not turn a stored 404 into a 304. If-Match and
// If-Unmodified-Since are left to the origin, which RFC 9110 13.1.1 and
// 13.1.4 allow a cache.
func (m *Middleware) write(w http.ResponseWriter, r *http.Request, resp *response, st status) {
	if ranged(r) && m.writeRange(w, r, resp, st) {
		return // a 206 or a 416: see range.go
	}
	// resp is shared (see response): w gets copies of its header values,
	// all in one allocation with the three fields added here, each slice
	// capped at its own end, so that whoever appends to one (an outer
	// middleware) reallocates it rather than write into the next.
	n := 3
	for _, vs := range resp.Header {
		n += len(vs)
	}
	vals := make([]string, 0, n)
	h := w.Header()
	for k, vs := range resp.Header {
		start := len(vals)
		vals = append(vals, vs...)
		h[k] = vals[start:len(vals):len(vals)]
	}
	age := max(0, m.now().UnixMilli()-resp.Stored) / 1000
	vals = append(vals, strconv.FormatInt(age, 10))
	h["Age"] = vals[len(vals)-1 : len(vals) : len(vals)]
	m.putStatus(h, st, vals[len(vals):], resp)
	if resp.Status >= 200 && resp.Status < 300 && notModified(r, resp.Header) {
		h.Del("Content-Length")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.WriteHeader(resp.Status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(resp.Body)
	}
}

// notModified reports whether r's conditions say its client holds the
// representation with header h: If-None-Match when present, otherwise
// If-Modified-Since against Last-Modified, or without one against Date
// (when the origin made the response, or the middleware received it: RFC
// 9111 4.3.2); ignored when either is not a valid date.
func notModified(r *http.Request, h http.Header) bool {
	if inm := r.Header["If-None-Match"]; len(inm) > 0 {
		etag := first(h, "Etag")
		return etag != "" && noneMatch(inm, etag)
	}
	v := first(r.Header, "If-Modified-Since")
	if v == "" {
		return false // without parsing: ParseTime's errors allocate
	}
	ims, err := http.ParseTime(v)
	if err != nil {
		return false
	}
	v = first(h, "Last-Modified")
	if v == "" {
		v = first(h, "Date")
	}
	lm, err := http.ParseTime(v)
	return err == nil && !lm.After(ims)
}

// noneMatch reports whether an If-None-Match field matches etag, by the
// weak comparison RFC 9110 13.1.2 prescribes.
func noneMatch(fields []string, etag string) bool {
	weak := func(t string) string { return strings.TrimPrefix(strings.TrimSpace(t), "W/") }
	want := weak(etag)
	for _, f := range fields {
		for _, t := range strings.Split(f, ",") {
			if t = strings.TrimSpace(t); t == "*" || (t != "" && weak(t) == want) {
				return true
			}
		}
	}
	return false
}

func (m *Middleware) setStatus(h http.Header, st status) {
	m.putStatus(h, st, make([]string, 0, 2), nil)
}

// putStatus sets the status header and Cache-Status in h for st, and the
// ttl of resp when it is set, with their values in room (capacity 2,
// length 0), which it takes over.
func (m *Middleware) putStatus(h http.Header, st status, room []string, resp *response) {
	if m.statusHeader != "-" {
		room = append(room, st.x)
		h[m.statusHeader] = room[len(room)-1 : len(room) : len(room)]
	}
	room = append(room, st.cacheStatus(resp, m.now()))
	h["Cache-Status"] = room[len(room)-1 : len(room) : len(room)]
}

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
		b = append(b, "; ttl="...)
		b = strconv.AppendInt(b, ttl, 10)
	}
	if st.detail != "" {
		b = append(b, "; detail="...)
		b = append(b, st.detail...)
	}
	return string(b)
}

func (resp *response) fresh(now time.Time) bool { return now.UnixMilli() < resp.FreshUntil }

// graceful reports whether resp may answer at now in place of a render
// that failed (see Freshness.StaleIfError).
func (resp *response) graceful(now time.Time) bool { return now.UnixMilli() < resp.GraceUntil }

// mustRevalidate reports whether resp, kept past its stale window, may be
// served only after a revalidation (see revalidate.go).
func (resp *response) mustRevalidate(now time.Time) bool {
	return resp.RevalidateFrom != 0 && now.UnixMilli() >= resp.RevalidateFrom && !resp.fresh(now)
}
