package middleware

import (
	"bufio"
	"io"
	"net"
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

// setStatus sets the status header in h, the header of a response about
// to go out, and puts the middleware's Cache-Status member after those h
// has (see putStatus). h may be a handler's: its names are in any letter
// case.
func (m *Middleware) setStatus(h http.Header, st status) {
	mergeField(h, "Cache-Status")
	m.putStatus(h, st, make([]string, 0, 2), nil)
}

// putStatus sets the status header in h for st, and Cache-Status: the
// members h has already (an origin's or another cache's, stored with the
// response or set by the handler), then the middleware's, with the ttl
// of resp when it is set (RFC 9211 2: each cache appends its member). The
// values go in room (capacity 2, length 0), which it takes over. h's
// Cache-Status must be under its canonical name.
func (m *Middleware) putStatus(h http.Header, st status, room []string, resp *response) {
	if m.statusHeader != "-" {
		room = append(room, st.x)
		h[m.statusHeader] = room[len(room)-1 : len(room) : len(room)]
	}
	member := st.cacheStatus(resp, m.now())
	if prior := h["Cache-Status"]; len(prior) > 0 {
		member = appendMember(prior, member)
	}
	room = append(room, member)
	h["Cache-Status"] = room[len(room)-1 : len(room) : len(room)]
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

// pass has next answer r itself on w, a response that does not go
// through the cache, with status st: the status header is set before next
// runs, and the middleware's Cache-Status member is put after the
// handler's when the header goes out (see memberWriter).
func (m *Middleware) pass(w http.ResponseWriter, r *http.Request, next http.Handler, st status) {
	if m.statusHeader != "-" {
		w.Header()[m.statusHeader] = []string{st.x}
	}
	mw := &memberWriter{ResponseWriter: w, m: m, st: st}
	next.ServeHTTP(mw, r)
	mw.put() // the handler wrote nothing: net/http sends the header now
}

// memberWriter is the writer of a response the handler writes itself
// (see pass): when the final header goes out (WriteHeader, the first
// Write, ReadFrom or Flush, or the handler's return without either),
// it puts the middleware's Cache-Status member after the members the
// handler set, once. An interim (1xx) response goes out as it is.
type memberWriter struct {
	http.ResponseWriter
	m    *Middleware
	st   status
	done bool
}

func (mw *memberWriter) put() {
	if mw.done {
		return
	}
	mw.done = true
	h := mw.ResponseWriter.Header()
	mergeField(h, "Cache-Status")
	member := mw.st.cacheStatus(nil, mw.m.now())
	if prior := h["Cache-Status"]; len(prior) > 0 {
		member = appendMember(prior, member)
	}
	h["Cache-Status"] = []string{member}
}

func (mw *memberWriter) WriteHeader(code int) {
	if code >= 200 || code == http.StatusSwitchingProtocols {
		mw.put()
	}
	mw.ResponseWriter.WriteHeader(code)
}

func (mw *memberWriter) Write(p []byte) (int, error) {
	mw.put()
	return mw.ResponseWriter.Write(p)
}

// ReadFrom keeps the ResponseWriter's own, for io.Copy (see statusWriter).
func (mw *memberWriter) ReadFrom(src io.Reader) (int64, error) {
	mw.put()
	if rf, ok := mw.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(struct{ io.Writer }{mw.ResponseWriter}, src)
}

// Flush sends the header (200 if none was written) and flushes.
func (mw *memberWriter) Flush() {
	mw.put()
	_ = http.NewResponseController(mw.ResponseWriter).Flush()
}

// Hijack hands the connection to the handler: no header goes out.
func (mw *memberWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	mw.done = true
	return http.NewResponseController(mw.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the real writer.
func (mw *memberWriter) Unwrap() http.ResponseWriter { return mw.ResponseWriter }

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
