package middleware

import (
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hotkv/stampede/internal/peek"
)

// This file answers range requests (RFC 9110 14) from a stored complete
// response. A GET with Range is served from the cache only when a fresh
// stored response for it is there; otherwise it goes to the handler as it
// is, Range and all, and shares nothing (a render for the cache would
// answer this client with the whole representation, which a client
// resuming a large download does not want). What is stored is always a
// complete response: a 206 is never stored.
//
// From a fresh stored 200 with a body:
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

// serveRange answers a GET with a Range header; see the comment above.
func (m *Middleware) serveRange(w http.ResponseWriter, r *http.Request, next http.Handler, base string) outcome {
	var resp *response
	if !m.o.AllowNoCache || !clientNoCache(r) {
		resp = m.freshStored(r, base)
	}
	if resp == nil {
		m.setStatus(w.Header(), statusBypass)
		next.ServeHTTP(w, r)
		return outcome{kind: EventBypass, reason: "range request without a fresh stored response"}
	}
	if resp.Status != http.StatusOK || len(resp.Body) == 0 || resp.Header["Content-Range"] != nil ||
		notModified(r, resp.Header) || !ifRange(r.Header["If-Range"], resp.Header) {
		m.write(w, r, resp, statusHit) // whole, or a 304
		return outcome{kind: EventHit}
	}
	size := int64(len(resp.Body))
	start, end, sat := parseRange(r.Header["Range"], size)
	switch sat {
	case rangeIgnored:
		m.write(w, r, resp, statusHit)
	case rangeUnsatisfiable:
		h := w.Header()
		m.setStatus(h, statusHit)
		h.Set("Content-Range", "bytes */"+strconv.FormatInt(size, 10))
		h.Set("Content-Length", "0")
		w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
	default:
		m.writePart(w, resp, start, end)
	}
	return outcome{kind: EventHit}
}

// freshStored returns the fresh stored response for r, a GET with the key
// of base, or nil. It looks under the key of the Vary names and
// generation this process knows for base and, if base's marker names
// others, once or twice more (see find).
func (m *Middleware) freshStored(r *http.Request, base string) *response {
	for range 3 {
		vary, gen := m.vary.get(base)
		key := base
		if len(vary) > 0 {
			key = variantKey(generationBase(base, gen), vary, r)
		}
		probe := new(peek.Probe)
		cached, err, current := m.find(r.Context(), probe, base, key, vary, gen)
		switch {
		case !current:
			continue
		case err != nil || !cached.matches(r) || !cached.fresh(m.now()):
			return nil // a miss, stale, another variant, or the cache failed: the handler answers
		}
		probe.Count()
		return &cached
	}
	return nil
}

// writePart answers with bytes start to end (inclusive, within the body)
// of resp, a stored 200, as a 206.
func (m *Middleware) writePart(w http.ResponseWriter, resp *response, start, end int64) {
	h := w.Header()
	// resp is shared (see response): w gets copies.
	for k, vs := range resp.Header {
		h[k] = slices.Clone(vs)
	}
	h.Set("Age", strconv.FormatInt(max(0, m.now().UnixMilli()-resp.Stored)/1000, 10))
	m.setStatus(h, statusHit)
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
