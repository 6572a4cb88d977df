package middleware

import (
	"errors"
	"net/http"
	"slices"
	"strconv"

	"github.com/hotkv/stampede/internal/httprule"
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
