package middleware

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// FuzzFreshened: the header fields of a 304 (names and values as a
// handler, or an origin behind a proxy, writes them into the map) update
// a stored response without panicking and without changing it (it is
// shared, read-only); names come out in canonical form; the fields that
// describe the stored body and its ETag keep their stored values; and a
// 304 that sets a cookie, in any letter case, makes the result not
// storable.
func FuzzFreshened(f *testing.F) {
	for _, seed := range [][4]string{
		{"X-Test", "b", "Cache-Control", "max-age=100"},
		{"set-cookie", "a=b", "content-length", "99"},
		{"ETAG", `"other"`, "Content-Encoding", "gzip"},
		{"Set-Cookie", "a=b", "cache-control", "private"},
		{"Trailer:Set-Cookie", "x", "Age", "5, 7"},
		{"Vary", "*", "Date", "not a date"},
		{"", "", "\x00", "\xff"},
		{"content-md5", "x", "Content-Range", "bytes 0-1/2"},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	o := Options{Freshness: FreshnessPolicy{Fresh: time.Minute}}
	m := &Middleware{o: o, rules: o.rules(1 << 20), maxValue: 1 << 20}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, n1, v1, n2, v2 string) {
		stored := http.Header{
			"Etag":           {`"v1"`},
			"Content-Length": {"3"},
			"Content-Type":   {"text/plain"},
			"Cache-Control":  {"max-age=60"},
			"Date":           {now.Add(-time.Hour).Format(http.TimeFormat)},
		}
		before := stored.Clone()
		h := http.Header{}
		h[n1] = append(h[n1], v1)
		h[n2] = append(h[n2], v2)
		cookie := strings.EqualFold(n1, "Set-Cookie") || strings.EqualFold(n2, "Set-Cookie")

		out := freshened(stored, h, now)
		if !equalHeader(stored, before) {
			t.Fatalf("the stored header changed: %v, was %v", stored, before)
		}
		for k := range out {
			if http.CanonicalHeaderKey(k) != k {
				t.Errorf("name %q not canonical", k)
			}
		}
		for _, k := range []string{"Etag", "Content-Length"} {
			if strings.Join(out[k], "|") != strings.Join(before[k], "|") {
				t.Errorf("%s = %q, want the stored %q", k, out[k], before[k])
			}
		}
		rec := &recorder{header: out, status: http.StatusOK}
		rec.body.WriteString("abc")
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		if cookie && m.storable(r, rec, now, now).Reason == "" {
			t.Errorf("a 304 with a cookie (%q, %q) made a storable response", n1, n2)
		}
	})
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, vs := range a {
		if strings.Join(vs, "\x00") != strings.Join(b[k], "\x00") || len(vs) != len(b[k]) {
			return false
		}
	}
	return true
}
