package httprule

import (
	"math"
	"net/http"
	"strings"
	"time"
)

// This file reads range requests (RFC 9110 14): the Range a client
// asks for, and whether its If-Range lets a range of a stored response
// be served.

// RangeResult says what ParseRange found in a request's Range.
type RangeResult int

const (
	RangeIgnored       RangeResult = iota // not one valid byte range: serve the whole response
	RangeUnsatisfiable                    // one byte range that misses the representation: 416
	RangeOne                              // one byte range within it: 206
)

// ParseRange parses the Range fields of a request against a
// representation of size bytes (size > 0): one range-spec of unit bytes
// (RFC 9110 14.1.2), whose first and last byte it returns, clamped to the
// representation. Several fields, several range-specs, an unknown unit or
// a syntax error give RangeIgnored. Numbers of any length are taken as
// they saturate at math.MaxInt64: no overflow, and nothing allocated
// beyond the splitting of the field.
func ParseRange(fields []string, size int64) (start, end int64, res RangeResult) {
	if len(fields) != 1 || size <= 0 {
		return 0, 0, RangeIgnored
	}
	unit, set, ok := strings.Cut(fields[0], "=")
	if !ok || !strings.EqualFold(strings.Trim(unit, " \t"), "bytes") {
		return 0, 0, RangeIgnored
	}
	// A list may have empty elements (RFC 9110 5.6.1); one range-spec
	// and nothing else is what is served.
	spec := ""
	for part := range strings.SplitSeq(set, ",") {
		if part = strings.Trim(part, " \t"); part == "" {
			continue
		}
		if spec != "" {
			return 0, 0, RangeIgnored
		}
		spec = part
	}
	first, last, ok := strings.Cut(spec, "-")
	if !ok {
		return 0, 0, RangeIgnored
	}
	if first == "" { // suffix-range: the last n bytes
		n, ok := digits(last)
		switch {
		case !ok:
			return 0, 0, RangeIgnored
		case n == 0:
			return 0, 0, RangeUnsatisfiable
		}
		return size - min(n, size), size - 1, RangeOne
	}
	start, ok = digits(first)
	if !ok {
		return 0, 0, RangeIgnored
	}
	end = math.MaxInt64
	if last != "" {
		if end, ok = digits(last); !ok || end < start {
			return 0, 0, RangeIgnored // invalid (RFC 9110 14.1.1)
		}
	}
	if start >= size {
		return 0, 0, RangeUnsatisfiable
	}
	return start, min(end, size-1), RangeOne
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

// IfRange reports whether a request's If-Range fields let a range be
// served from a stored response with header h (RFC 9110 13.1.5): true
// without If-Range; with an entity-tag, when it is strong and equal to
// h's ETag; with an HTTP-date, when it equals h's Last-Modified and that
// is a strong validator, at least a second before h's Date (RFC 9110
// 8.8.2.2). Anything else, several fields included, is false: the whole
// response is served.
func IfRange(fields []string, h http.Header) bool {
	switch len(fields) {
	case 0:
		return true
	case 1:
	default:
		return false
	}
	v := strings.Trim(fields[0], " \t")
	if strings.HasPrefix(v, `"`) || strings.HasPrefix(v, "W/") {
		etag := h.Get("Etag")
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
