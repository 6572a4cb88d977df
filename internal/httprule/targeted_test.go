package httprule

import (
	"net/http"
	"testing"
	"time"
)

// A targeted field is a Structured Fields Dictionary of Cache-Control
// directives: what does not parse, and a directive whose value has the
// wrong type, make the whole field invalid (as if absent); parameters and
// unknown directives are ignored.
func TestParseTargeted(t *testing.T) {
	hour := time.Hour
	for _, tc := range []struct {
		v    string
		ok   bool
		want cacheControl
	}{
		{"max-age=3600", true, cacheControl{maxAge: hour, hasMaxAge: true}},
		{"  max-age=3600  ", true, cacheControl{maxAge: hour, hasMaxAge: true}},
		{"foobar, max-age=3600", true, cacheControl{maxAge: hour, hasMaxAge: true}},
		{"max-age=3600;x=1, foo=(a \"b\" 1.5);y, bar=:aGk=:, baz=?0, d=@1700000000, e=%\"x\"", true, cacheControl{maxAge: hour, hasMaxAge: true}},
		{"max-age=1, max-age=3600", true, cacheControl{maxAge: hour, hasMaxAge: true}},
		{"max-age=99999999999", true, cacheControl{maxAge: time.Duration(1<<31) * time.Second, hasMaxAge: true}},
		{"max-age=0", true, cacheControl{hasMaxAge: true}},
		{"s-maxage=60, stale-while-revalidate=30, stale-if-error=90", true, cacheControl{sMaxAge: time.Minute, hasSMaxAge: true, staleWhileRevalidate: 30 * time.Second, staleIfError: 90 * time.Second}},
		{"no-store", true, cacheControl{noStore: true}},
		{"private, no-cache", true, cacheControl{private: true, noCache: true}},
		{`private="set-cookie", no-cache="x"`, true, cacheControl{private: true, noCache: true}},
		{"public, must-revalidate, proxy-revalidate, must-understand", true, cacheControl{public: true, mustRevalidate: true, proxyRevalidate: true, mustUnderstand: true}},
		{"no-store=?1", true, cacheControl{noStore: true}},
		{"no-store=?0", false, cacheControl{}},
		{"no-store=1", false, cacheControl{}},
		{`max-age="10000"`, false, cacheControl{}},
		{"max-age=10.5", false, cacheControl{}},
		{"max-age=-1", false, cacheControl{}},
		{"max-age=1234567890123456", false, cacheControl{}},
		{"max-age=10000, &&&&&", false, cacheControl{}},
		{"max-age =100", false, cacheControl{}},
		{"max-age= 100", false, cacheControl{}},
		{"MaX-aGe=3600", false, cacheControl{}},
		{"max-age=3600,", false, cacheControl{}},
		{",max-age=3600", false, cacheControl{}},
		{"max-age=3600 private", false, cacheControl{}},
		{`foo="unterminated`, false, cacheControl{}},
		{"foo=\"\x7f\"", false, cacheControl{}},
		{"foo=(a b", false, cacheControl{}},
		{"foo=:not base64!:", false, cacheControl{}},
		{"", false, cacheControl{}},
		{"   ", false, cacheControl{}},
	} {
		got, ok := parseTargeted([]string{tc.v})
		if tc.ok {
			tc.want.targeted = true
		}
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseTargeted(%q) = %+v, %v; want %+v, %v", tc.v, got, ok, tc.want, tc.ok)
		}
	}
	// Lines join into one Dictionary.
	if got, ok := parseTargeted([]string{"max-age=60", "no-store"}); !ok || !got.noStore || got.maxAge != time.Minute {
		t.Errorf("two lines: %+v, %v", got, ok)
	}
}

// With Targeted set, the first valid field of the list governs storing
// and freshness, and Cache-Control, Expires and Surrogate-Control do not
// count; an invalid or absent one leaves them in charge.
func TestStore_targeted(t *testing.T) {
	responded := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	date := func(d time.Duration) string { return responded.Add(d).Format(http.TimeFormat) }
	p := Policy{Explicit: true, SurrogateControl: true, Targeted: []string{"Own-Cache-Control", "CDN-Cache-Control"}}
	for _, tc := range []struct {
		name     string
		header   http.Header
		reason   string
		lifetime time.Duration
	}{
		{"CDN-Cache-Control over Cache-Control no-store", http.Header{"Cache-Control": {"no-store"}, "Cdn-Cache-Control": {"max-age=600"}}, "", 10 * time.Minute},
		{"CDN-Cache-Control no-store over Cache-Control max-age", http.Header{"Cache-Control": {"max-age=600"}, "Cdn-Cache-Control": {"no-store"}}, "no-store", 0},
		{"CDN-Cache-Control private", http.Header{"Cache-Control": {"max-age=600"}, "Cdn-Cache-Control": {"private"}}, "private", 0},
		{"short CDN-Cache-Control over long Cache-Control", http.Header{"Cache-Control": {"max-age=3600"}, "Cdn-Cache-Control": {"max-age=60"}}, "", time.Minute},
		{"over Surrogate-Control", http.Header{"Surrogate-Control": {"max-age=3600"}, "Cdn-Cache-Control": {"max-age=60"}}, "", time.Minute},
		{"Expires does not count", http.Header{"Expires": {date(time.Hour)}, "Date": {date(0)}, "Cdn-Cache-Control": {"public"}}, "no explicit freshness (s-maxage, max-age, Expires)", 0},
		{"a past Expires does not count", http.Header{"Expires": {date(-time.Hour)}, "Date": {date(0)}, "Cdn-Cache-Control": {"max-age=60"}}, "", time.Minute},
		{"Pragma does not count", http.Header{"Pragma": {"no-cache"}, "Cdn-Cache-Control": {"max-age=60"}}, "", time.Minute},
		{"the first of the list", http.Header{"Own-Cache-Control": {"max-age=120"}, "Cdn-Cache-Control": {"no-store"}}, "", 2 * time.Minute},
		{"an invalid first, the next", http.Header{"Own-Cache-Control": {"max-age=\"1\""}, "Cdn-Cache-Control": {"max-age=60"}}, "", time.Minute},
		{"invalid: Cache-Control governs", http.Header{"Cache-Control": {"no-store"}, "Cdn-Cache-Control": {"max-age=10000, &&&&&"}}, "no-store", 0},
		{"wrong type: Cache-Control governs", http.Header{"Cache-Control": {"max-age=60"}, "Cdn-Cache-Control": {`max-age="10000"`}}, "", time.Minute},
		{"still not shared: a cookie", http.Header{"Set-Cookie": {"a=b"}, "Cdn-Cache-Control": {"max-age=60"}}, "sets a cookie", 0},
		{"Age counts", http.Header{"Age": {"7200"}, "Cdn-Cache-Control": {"max-age=3600"}}, "stale when received (Age or Date)", 0},
	} {
		v := Store(&Response{Status: 200, Header: tc.header, Requested: responded, Responded: responded}, &p)
		reason, lifetime := v.Reason, v.Lifetime
		if reason != tc.reason || lifetime != tc.lifetime {
			t.Errorf("%s: reason %q, lifetime %v; want %q, %v", tc.name, reason, lifetime, tc.reason, tc.lifetime)
		}
	}
}

// FuzzParseTargeted: any field value parses without panicking, to the
// same result every time; a valid one has lifetimes within RFC 9111's
// 2^31 seconds, an invalid one no directives; a value that parses is
// still a Dictionary with a known directive appended.
func FuzzParseTargeted(f *testing.F) {
	for _, seed := range []string{
		"max-age=3600", "foobar, max-age=3600", `max-age="1"`, "max-age=10000, &&&&&", "no-store=?1",
		"a=(1 2;x \"s\");y=:aGk=:, b=@1, c=%\"x\", d=1.25", "max-age =1", "MaX-aGe=1", "", ",", "a=?2",
	} {
		f.Add(seed)
	}
	const limit = time.Duration(1<<31) * time.Second
	f.Fuzz(func(t *testing.T, v string) {
		cc, ok := parseTargeted([]string{v})
		if again, ok2 := parseTargeted([]string{v}); again != cc || ok2 != ok {
			t.Fatalf("%q: two parses differ: %+v, %v and %+v, %v", v, cc, ok, again, ok2)
		}
		if !ok {
			if cc != (cacheControl{}) {
				t.Fatalf("%q: invalid, yet directives %+v", v, cc)
			}
			return
		}
		for _, d := range []time.Duration{cc.maxAge, cc.sMaxAge, cc.staleWhileRevalidate, cc.staleIfError} {
			if d < 0 || d > limit {
				t.Fatalf("%q: lifetime %v out of [0, 2^31 s]: %+v", v, d, cc)
			}
		}
		if more, ok := parseTargeted([]string{v + ", no-store"}); !ok || !more.noStore {
			t.Fatalf("%q parses, but not with \", no-store\" appended: %+v, %v", v, more, ok)
		}
	})
}
