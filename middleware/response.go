package middleware

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/hotkv/stampede/internal/httprule"
)

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

// writeRange answers r, a GET with Range, with its range of resp (a 206
// or a 416), and reports whether it did; otherwise write serves resp
// whole, or a 304. See the comment above.
func (m *Middleware) writeRange(w http.ResponseWriter, r *http.Request, resp *response, st status) bool {
	if resp.Status != http.StatusOK || len(resp.Body) == 0 || resp.Header["Content-Range"] != nil ||
		notModified(r, resp.Header) || !httprule.IfRange(r.Header["If-Range"], resp.Header) {
		return false
	}
	size := int64(len(resp.Body))
	start, end, sat := httprule.ParseRange(r.Header["Range"], size)
	switch sat {
	case httprule.RangeIgnored:
		return false
	case httprule.RangeUnsatisfiable:
		h := w.Header()
		m.putStatus(h, st, make([]string, 0, 2), resp)
		h.Set("Content-Range", "bytes */"+strconv.FormatInt(size, 10))
		h.Set("Content-Length", "0")
		w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
	default:
		m.writePart(w, resp, start, end, st)
	}
	return true
}

// writePart answers with bytes start to end (inclusive, within the body)
// of resp, a stored 200, as a 206, with the status header status.
func (m *Middleware) writePart(w http.ResponseWriter, resp *response, start, end int64, st status) {
	h := w.Header()
	// resp is shared (see response): w gets copies.
	for k, vs := range resp.Header {
		h[k] = slices.Clone(vs)
	}
	h.Set("Age", strconv.FormatInt(max(0, m.now().UnixMilli()-resp.Stored)/1000, 10))
	m.putStatus(h, st, make([]string, 0, 2), resp)
	size := int64(len(resp.Body))
	h.Set("Content-Range", "bytes "+strconv.FormatInt(start, 10)+"-"+strconv.FormatInt(end, 10)+"/"+strconv.FormatInt(size, 10))
	h.Set("Content-Length", strconv.FormatInt(end-start+1, 10))
	w.WriteHeader(http.StatusPartialContent)
	_, _ = w.Write(resp.Body[start : end+1])
}
