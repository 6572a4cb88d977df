package httprule

import (
	"net/http"
	"strings"
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

// TestStore_malformedCacheControl: whatever Cache-Control a response
// has, Store either refuses it (what cannot be read is treated
// conservatively) or gives it a sane time to live, fresh and stale
// together. (TestMiddleware_malformedCacheControl asks the same of the
// middleware, through a server.)
func TestStore_malformedCacheControl(t *testing.T) {
	const max = time.Duration(1<<31) * time.Second // RFC 9111 1.2.2
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	p := Policy{TTL: time.Minute}
	for _, tt := range []struct {
		name   string
		cc     []string
		stored time.Duration // fresh plus stale; 0: not stored
	}{
		{"non-numbers", []string{"max-age=abc, s-maxage="}, 0},
		{"no value", []string{"max-age"}, 0},
		{"empty value", []string{"s-maxage="}, 0},
		{"negative", []string{"max-age=-5"}, 0},
		{"beyond int64", []string{"max-age=99999999999999999999"}, 0},
		{"beyond 2^31", []string{"max-age=9999999999"}, max},
		{"stale window beyond 2^31", []string{"max-age=10, stale-while-revalidate=99999999999"}, 10*time.Second + max},
		{"bad stale window", []string{"max-age=10, stale-if-error=soon"}, 0},
		{"unbalanced quote swallows private", []string{`max-age="60, private`}, 0},
		{"unbalanced quote after private", []string{`private, max-age="60`}, 0},
		{"unbalanced quote in an unknown directive", []string{`max-age=60, x="unterminated, no-store`}, 60 * time.Second},
		{"escaped quote", []string{`max-age=60, x="a\"b,c", y`}, 60 * time.Second},
		{"trailing backslash", []string{`max-age=60, x="\`}, 60 * time.Second},
		{"first max-age wins", []string{"max-age=60, max-age=0"}, 60 * time.Second},
		{"empty directives", []string{",,, max-age=30 ,, ,"}, 30 * time.Second},
		{"spaces around =", []string{"max-age = 30"}, 30 * time.Second},
		{"two fields", []string{"max-age=30", "no-store"}, 0},
		{"two fields, s-maxage in the second", []string{"max-age=30", "s-maxage=40"}, 40 * time.Second},
		{"unknown directives only", []string{"foo, bar=baz, =, ==, \"\""}, time.Minute},
		{"thousands of directives", []string{strings.Repeat("x-a=1, ", 5000) + "max-age=20"}, 20 * time.Second},
		{"obs-text", []string{"max-age=\xff, \xfe"}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := Store(&Response{Status: 200, Header: http.Header{"Cache-Control": tt.cc}, Requested: now, Responded: now}, &p)
			switch {
			case tt.stored == 0 && v.Reason == "":
				t.Errorf("stored for %v+%v, want not stored", v.Lifetime, v.Stale)
			case tt.stored != 0 && v.Reason != "":
				t.Errorf("not stored (%s), want %v", v.Reason, tt.stored)
			case tt.stored != 0 && v.Lifetime-v.Age+v.Stale != tt.stored:
				t.Errorf("stored for %v+%v, want %v", v.Lifetime-v.Age, v.Stale, tt.stored)
			}
		})
	}
}

// TestStore_expiresAndPragma: Expires gives the freshness lifetime when
// Cache-Control has no max-age or s-maxage; a date that is invalid or not
// after the response's Date (or when it was received) means already
// stale, which is not stored; Pragma: no-cache without Cache-Control
// means no-cache. (TestMiddleware_expiresAndPragma asks the same of the
// middleware, through a server.)
func TestStore_expiresAndPragma(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	date := func(d time.Duration) string { return now.Add(d).Format(http.TimeFormat) }
	defaults := Policy{TTL: time.Minute}
	for _, tt := range []struct {
		name  string
		h     http.Header
		p     Policy
		fresh time.Duration // 0: not stored
	}{
		{"Expires 0 and Pragma", http.Header{"Expires": {"0"}, "Pragma": {"no-cache"}}, defaults, 0},
		{"Expires 0", http.Header{"Expires": {"0"}}, defaults, 0},
		{"Expires invalid", http.Header{"Expires": {"soon"}}, defaults, 0},
		{"Expires empty", http.Header{"Expires": {""}}, defaults, 0},
		{"Expires past", http.Header{"Expires": {date(-time.Hour)}}, defaults, 0},
		{"Expires at Date", http.Header{"Date": {date(0)}, "Expires": {date(0)}}, defaults, 0},
		{"Expires past with a stale window", http.Header{"Expires": {date(-time.Second)}}, Policy{TTL: time.Minute, Stale: time.Hour}, 0},
		{"Expires from Date", http.Header{"Date": {date(0)}, "Expires": {date(30 * time.Second)}}, defaults, 30 * time.Second},
		{"Expires from now", http.Header{"Expires": {date(40 * time.Second)}}, Policy{TTL: time.Hour}, 40 * time.Second},
		// Made an hour ago upstream, with an hour and 20s to live.
		{"Expires within an old Date's lifetime", http.Header{"Date": {date(-time.Hour)}, "Expires": {date(20 * time.Second)}}, defaults, 20 * time.Second},
		{"max-age over Expires", http.Header{"Cache-Control": {"max-age=50"}, "Expires": {"0"}}, defaults, 50 * time.Second},
		{"s-maxage over Expires", http.Header{"Cache-Control": {"s-maxage=50"}, "Expires": {date(time.Hour)}}, defaults, 50 * time.Second},
		{"Pragma no-cache", http.Header{"Pragma": {"No-Cache"}}, defaults, 0},
		{"Pragma with Cache-Control", http.Header{"Pragma": {"no-cache"}, "Cache-Control": {"public, max-age=45"}}, defaults, 45 * time.Second},
		{"Pragma other", http.Header{"Pragma": {"x-other"}}, Policy{TTL: 25 * time.Second}, 25 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			v := Store(&Response{Status: 200, Header: tt.h, Requested: now, Responded: now}, &tt.p)
			switch {
			case tt.fresh == 0 && v.Reason == "":
				t.Errorf("stored, fresh for %v, want not stored", v.Lifetime-v.Age)
			case tt.fresh != 0 && v.Reason != "":
				t.Errorf("not stored (%s), want fresh for %v", v.Reason, tt.fresh)
			case tt.fresh != 0 && v.Lifetime-v.Age != tt.fresh:
				t.Errorf("fresh for %v, want %v", v.Lifetime-v.Age, tt.fresh)
			}
		})
	}
}
