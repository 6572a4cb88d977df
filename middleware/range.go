package middleware

import (
	"errors"
	"net/http"
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
