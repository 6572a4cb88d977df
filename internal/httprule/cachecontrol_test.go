package httprule

import (
	"testing"
	"time"
)

// FuzzParseCacheControl: any field values parse without panicking, into
// durations within [0, 2^31 s] (RFC 9111 1.2.2), and what a field says is
// not changed by unrelated directives after it.
func FuzzParseCacheControl(f *testing.F) {
	for _, seed := range [][2]string{
		{"max-age=60", ""},
		{"public, max-age=60, s-maxage=120", "stale-while-revalidate=30, stale-if-error=600"},
		{"max-age=abc, s-maxage=", ""},
		{"max-age=99999999999999999999", "max-age=9999999999"},
		{`max-age="60, private`, `private="Set-Cookie", no-cache="X"`},
		{`x="a\"b,c", no-store`, `"`},
		{`\`, `x="\`},
		{"NO-STORE, Private, MUST-REVALIDATE", "proxy-revalidate"},
		{"max-age=-1", "s-maxage=+5"},
		{",,,=,==", "max-age = 30 ,"},
		{"max-age=\xff\xfe", "\x00"},
	} {
		f.Add(seed[0], seed[1])
	}
	const max = time.Duration(1<<31) * time.Second
	f.Fuzz(func(t *testing.T, a, b string) {
		cc := parseCacheControl([]string{a, b})
		for name, d := range map[string]time.Duration{
			"max-age": cc.maxAge, "s-maxage": cc.sMaxAge,
			"stale-while-revalidate": cc.staleWhileRevalidate, "stale-if-error": cc.staleIfError,
		} {
			if d < 0 || d > max {
				t.Errorf("%s = %v from %q, %q", name, d, a, b)
			}
		}
		if !cc.hasMaxAge && cc.maxAge != 0 || !cc.hasSMaxAge && cc.sMaxAge != 0 {
			t.Errorf("a duration without its directive: %+v", cc)
		}
		// A later field adds to what an earlier one says; it does not
		// take no-store, private or no-cache away, nor make it readable.
		first := parseCacheControl([]string{a})
		if first.noStore && !cc.noStore || first.private && !cc.private || first.noCache && !cc.noCache || first.broken && !cc.broken {
			t.Errorf("%q lost a directive of %q: %+v then %+v", b, a, first, cc)
		}
		if first.hasMaxAge && (!cc.hasMaxAge || cc.maxAge != first.maxAge) {
			t.Errorf("%q changed max-age of %q", b, a)
		}
	})
}

// An HTTP-date is read in the three forms RFC 9110 5.6.7 names, with
// their exact spacing and two-digit clock fields, names in any letter
// case; anything else is not a date (an Expires that is none means
// already expired).
func TestParseHTTPDate(t *testing.T) {
	want := time.Date(2050, 8, 18, 2, 1, 18, 0, time.UTC)
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"Thu, 18 Aug 2050 02:01:18 GMT", true},
		{" Thu, 18 Aug 2050 02:01:18 GMT\t", true},
		{"Thursday, 18-Aug-50 02:01:18 GMT", true},
		{"Thu Aug 18 02:01:18 2050", true},
		{"THU, 18 Aug 2050 02:01:18 GMT", true},
		{"Thu, 18 AUG 2050 02:01:18 GMT", true},
		{"Thu, 18 Aug 2050 02:01:18 gMT", true},
		{"Thu, 18 Aug 2050 02:01:18 UTC", false},
		{"Thu, 18 Aug 2050 02:01:18 AEST", false},
		{"Thu, 18 Aug 50 02:01:18 GMT", false},
		{"Thu 18 Aug 2050 02:01:18 GMT", false},
		{"Thu, 18  Aug  2050 02:01:18 GMT", false},
		{"Thu, 18-Aug-2050 02:01:18 GMT", false},
		{"Thu, 18 Aug 2050 02.01.18 GMT", false},
		{"Thu, 18 Aug 2050 2:01:18 GMT", false},
		{"Thu, 18 Aug 2050 02:1:18 GMT", false},
		{"Thursday, 18-Aug-50 2:01:18 GMT", false},
		{"Thu Aug 18 2:01:18 2050", false},
		{"Thu Aug 18  02:01:18 2050", false},
		{"0", false},
		{"", false},
		{"Thu, 18 Aug 2050 02:01:18 GMT, Thu, 18 Aug 2050 02:01:18 GMT", false},
	} {
		got, ok := parseHTTPDate(tc.v)
		if ok != tc.ok || ok && !got.Equal(want) {
			t.Errorf("parseHTTPDate(%q) = %v, %v; want %v", tc.v, got, ok, tc.ok)
		}
	}
	if got, ok := parseHTTPDate("Sun Nov  6 08:49:37 1994"); !ok || !got.Equal(time.Date(1994, 11, 6, 8, 49, 37, 0, time.UTC)) {
		t.Errorf("asctime with a one-digit day: %v, %v", got, ok)
	}
}
