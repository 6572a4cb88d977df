package middleware

import (
	"errors"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file answers range requests (RFC 9110 14) from a stored complete
// response. A GET with Range takes the path every GET takes (see serve):
// a fresh hit, a stale one while the one refresh runs, or a share of the
// one render of its key in the cluster, which is made without the
// client's Range and If-Range (prepareRender), for the cache. Whatever
// stored response it is answered with, it gets its range of it (see
// writeRange); what is stored is always a complete response: a 206 is
// never stored. A render that cannot be stored answers nobody's range:
// a client that asked for one is rendered alone, its Range sent to the
// handler, whether it waited for that render or made it (see
// renderForRange).
//
// From a stored 200 with a body:
//   - one satisfiable byte range (bytes=a-b, bytes=a-, bytes=-n) gets a
//     206 with Content-Range and that part of the stored body;
//   - a range that cannot be satisfied (it starts at or past the end,
//     bytes=-0) gets a 416 with Content-Range: bytes */length;
//   - several ranges, a malformed Range, another unit than bytes: the
//     Range is ignored and the whole response is served (RFC 9110 14.2
//     lets a server ignore it), so no multipart body is built and no
//     Range makes the middleware do more than copy one slice;
//   - If-Range that does not hold (RFC 9110 13.1.5: a strong ETag equal
//     to the stored one, or an HTTP-date equal to a Last-Modified at
//     least a second before the stored Date) gets the whole response;
//   - If-None-Match and If-Modified-Since come first (RFC 9110 13.2.2),
//     as for any hit: a 304 when they match.
//
// Other stored statuses (404, 301, 204, ...) and an empty body are
// served whole: Range applies to a representation, which an error or a
// redirect does not carry.

// ranged reports whether r is a GET with a Range header, to be answered
// with a range of the response it gets (a HEAD with one bypasses the
// cache, see bypass).
func ranged(r *http.Request) bool {
	return r.Method == http.MethodGet && present(r.Header, "Range")
}

// writeRange answers r, a GET with Range, with its range of resp (a 206
// or a 416), and reports whether it did; otherwise write serves resp
// whole, or a 304. See the comment above.
func (m *Middleware) writeRange(w http.ResponseWriter, r *http.Request, resp *response, st status) bool {
	if resp.Status != http.StatusOK || len(resp.Body) == 0 || resp.Header["Content-Range"] != nil ||
		notModified(r, resp.Header) || !ifRange(r.Header["If-Range"], resp.Header) {
		return false
	}
	size := int64(len(resp.Body))
	start, end, sat := parseRange(r.Header["Range"], size)
	switch sat {
	case rangeIgnored:
		return false
	case rangeUnsatisfiable:
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

// renderForRange renders for job j, as renderFor does, for r, a GET with
// Range, and answers r with its range of the response once it is stored.
// While the render runs it answers nobody: what a render that cannot be
// stored passes through goes to a rangeRender, which stops the handler
// at its next write, and r is then rendered alone, with its Range, as the
// render's waiters are (see serve). Passing the render's whole response
// to r instead would send a media player that asked for the end of a
// large file the whole file.
func (m *Middleware) renderForRange(w http.ResponseWriter, r *http.Request, next http.Handler, j *job) outcome {
	res := m.renderFor(w, r, next, j, &rangeRender{header: make(http.Header)})
	if res.err == nil || res.resp.Status != 0 {
		// Stored, or not but answered all the same (it outlasted the
		// load's timeout): r has had its range of it.
		return rendered(res)
	}
	if err := r.Context().Err(); err != nil {
		return outcome{kind: EventCanceled, err: err} // the client is gone
	}
	m.pass(w, r, next, statusBypass)
	return unshared(res.err)
}

// errRangeRender is what a handler's write gets once a render for a
// client with Range is passed through: nobody reads it (see
// renderForRange).
var errRangeRender = errors.New("middleware: a render that cannot be stored, for a range request that renders alone")

// rangeRender is the client writer of a render made for a request with
// Range (see renderForRange): it keeps nothing, and writes fail so that
// the handler stops. Informational responses (103) go nowhere either.
type rangeRender struct{ header http.Header }

func (d *rangeRender) Header() http.Header       { return d.header }
func (d *rangeRender) WriteHeader(int)           {}
func (d *rangeRender) Write([]byte) (int, error) { return 0, errRangeRender }

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

// rangeResult says what parseRange found.
type rangeResult int

const (
	rangeIgnored       rangeResult = iota // not one valid byte range: serve the whole response
	rangeUnsatisfiable                    // one byte range that misses the representation: 416
	rangeOne                              // one byte range within it: 206
)

// parseRange parses the Range fields of a request against a
// representation of size bytes (size > 0): one range-spec of unit bytes
// (RFC 9110 14.1.2), whose first and last byte it returns, clamped to the
// representation. Several fields, several range-specs, an unknown unit or
// a syntax error give rangeIgnored. Numbers of any length are taken as
// they saturate at math.MaxInt64: no overflow, and nothing allocated
// beyond the splitting of the field.
func parseRange(fields []string, size int64) (start, end int64, res rangeResult) {
	if len(fields) != 1 || size <= 0 {
		return 0, 0, rangeIgnored
	}
	unit, set, ok := strings.Cut(fields[0], "=")
	if !ok || !strings.EqualFold(strings.Trim(unit, " \t"), "bytes") {
		return 0, 0, rangeIgnored
	}
	// A list may have empty elements (RFC 9110 5.6.1); one range-spec
	// and nothing else is what is served.
	spec := ""
	for part := range strings.SplitSeq(set, ",") {
		if part = strings.Trim(part, " \t"); part == "" {
			continue
		}
		if spec != "" {
			return 0, 0, rangeIgnored
		}
		spec = part
	}
	first, last, ok := strings.Cut(spec, "-")
	if !ok {
		return 0, 0, rangeIgnored
	}
	if first == "" { // suffix-range: the last n bytes
		n, ok := digits(last)
		switch {
		case !ok:
			return 0, 0, rangeIgnored
		case n == 0:
			return 0, 0, rangeUnsatisfiable
		}
		return size - min(n, size), size - 1, rangeOne
	}
	start, ok = digits(first)
	if !ok {
		return 0, 0, rangeIgnored
	}
	end = math.MaxInt64
	if last != "" {
		if end, ok = digits(last); !ok || end < start {
			return 0, 0, rangeIgnored // invalid (RFC 9110 14.1.1)
		}
	}
	if start >= size {
		return 0, 0, rangeUnsatisfiable
	}
	return start, min(end, size-1), rangeOne
}

// digits parses a non-empty run of ASCII digits, saturating at
// math.MaxInt64.
func digits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			n = math.MaxInt64
			continue
		}
		n = n*10 + d
	}
	return n, true
}

// ifRange reports whether a request's If-Range fields let a range be
// served from a stored response with header h (RFC 9110 13.1.5): true
// without If-Range; with an entity-tag, when it is strong and equal to
// h's ETag; with an HTTP-date, when it equals h's Last-Modified and that
// is a strong validator, at least a second before h's Date (RFC 9110
// 8.8.2.2). Anything else, several fields included, is false: the whole
// response is served.
func ifRange(fields []string, h http.Header) bool {
	switch len(fields) {
	case 0:
		return true
	case 1:
	default:
		return false
	}
	v := strings.Trim(fields[0], " \t")
	if strings.HasPrefix(v, `"`) || strings.HasPrefix(v, "W/") {
		etag := first(h, "Etag")
		return len(v) >= 2 && strings.HasPrefix(v, `"`) && strings.HasSuffix(v, `"`) && v == etag
	}
	since, err := http.ParseTime(v)
	if err != nil {
		return false
	}
	lm, okLM := httpDate(h["Last-Modified"])
	date, okDate := httpDate(h["Date"])
	return okLM && okDate && lm.Equal(since) && date.Sub(lm) >= time.Second
}
