package middleware

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStorable_rules: every rule of storable, family by family (status,
// Cache-Control directives, sharing, form, size, Surrogate-Control, Age,
// the freshness lifetime and the stale window), gives its reason, or the
// age, lifetime and stale window of a response it stores.
func TestStorable_rules(t *testing.T) {
	responded := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	date := func(d time.Duration) string { return responded.Add(d).Format(http.TimeFormat) }
	const minute = time.Minute
	defaults := Options{Freshness: FreshnessPolicy{TTL: minute}}
	explicit := Options{Freshness: FreshnessPolicy{TTL: minute, Explicit: true}}
	for _, tt := range []struct {
		name   string
		o      Options
		status int
		header http.Header
		body   int // bytes
		// want: the reason, or the age, lifetime and stale window
		reason                   string
		age, lifetime, staleness time.Duration
	}{
		// Status.
		{name: "server error", o: defaults, status: 500, reason: "server error"},
		{name: "503", o: explicit, status: 503, header: http.Header{"Cache-Control": {"max-age=60"}}, reason: "server error"},
		{name: "501 is stored", o: defaults, status: 501, lifetime: minute},
		{name: "304", o: defaults, status: 304, reason: "status 304 answers the request's conditions"},
		{name: "412", o: explicit, status: 412, header: http.Header{"Cache-Control": {"max-age=60"}}, reason: "status 412 answers the request's conditions"},
		{name: "206", o: Options{Freshness: FreshnessPolicy{TTL: minute}, Statuses: []int{206}}, status: 206, reason: "status 206 (a partial response)"},
		{name: "ShouldCache no", o: Options{Freshness: FreshnessPolicy{TTL: minute}, ShouldCache: func(int, http.Header) bool { return false }}, status: 200, reason: "ShouldCache said no"},
		{name: "ShouldCache yes", o: Options{Freshness: FreshnessPolicy{TTL: minute}, ShouldCache: func(int, http.Header) bool { return true }}, status: 201, lifetime: minute},
		{name: "status not listed", o: defaults, status: 201, reason: "status 201"},
		{name: "Statuses", o: Options{Freshness: FreshnessPolicy{TTL: minute}, Statuses: []int{201}}, status: 201, lifetime: minute},
		{name: "explicit: any final status", o: explicit, status: 302, header: http.Header{"Cache-Control": {"max-age=60"}}, lifetime: minute},

		// Cache-Control directives.
		{name: "must-understand, unknown status", o: Options{Freshness: FreshnessPolicy{TTL: minute}, Statuses: []int{299}}, status: 299, header: http.Header{"Cache-Control": {"must-understand, max-age=60"}}, reason: "must-understand with unknown status 299"},
		{name: "must-understand, known status", o: defaults, status: 200, header: http.Header{"Cache-Control": {"must-understand, max-age=60"}}, lifetime: minute},
		{name: "must-understand lifts no-store for a known status", o: defaults, status: 200, header: http.Header{"Cache-Control": {"must-understand, no-store, max-age=60"}}, lifetime: minute},
		{name: "must-understand, no-store, unknown status", o: Options{Freshness: FreshnessPolicy{TTL: minute}, Statuses: []int{299}}, status: 299, header: http.Header{"Cache-Control": {"must-understand, no-store, max-age=60"}}, reason: "must-understand with unknown status 299"},
		{name: "no-store alone", o: defaults, status: 200, header: http.Header{"Cache-Control": {"no-store, max-age=60"}}, reason: "no-store"},
		{name: "no-store", o: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=60, no-store"}}, reason: "no-store"},
		{name: "no-store, second line", o: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=60", "NO-STORE"}}, reason: "no-store"},
		{name: "private", o: defaults, status: 200, header: http.Header{"Cache-Control": {"private"}}, reason: "private"},
		{name: "no-cache", o: defaults, status: 200, header: http.Header{"Cache-Control": {"no-cache"}, "Etag": {`"a"`}}, reason: "no-cache (would need revalidation)"},
		{name: "no-cache without a validator", o: Options{Freshness: FreshnessPolicy{TTL: minute, RevalidateNoCache: true}}, status: 200, header: http.Header{"Cache-Control": {"no-cache"}}, reason: "no-cache (would need revalidation)"},
		{name: "no-cache, revalidation off", o: Options{Freshness: FreshnessPolicy{TTL: minute, RevalidateNoCache: true, Revalidate: -1}}, status: 200, header: http.Header{"Cache-Control": {"no-cache"}, "Etag": {`"a"`}}, reason: "no-cache (would need revalidation)"},
		{name: "no-cache revalidated", o: Options{Freshness: FreshnessPolicy{TTL: minute, RevalidateNoCache: true}}, status: 200, header: http.Header{"Cache-Control": {"no-cache, max-age=60"}, "Last-Modified": {date(-time.Hour)}, "Age": {"5"}}, age: 5 * time.Second},

		// Sharing.
		{name: "Set-Cookie", o: defaults, status: 200, header: http.Header{"Set-Cookie": {"a=b"}}, reason: "sets a cookie"},
		{name: "set-cookie in lower case", o: defaults, status: 200, header: http.Header{"set-cookie": {"a=b"}}, reason: "sets a cookie"},
		{name: "Trailer", o: defaults, status: 200, header: http.Header{"Trailer": {"X-A"}}, reason: "declares or sets trailers"},
		{name: "trailer prefix", o: defaults, status: 200, header: http.Header{"trailer:x-a": {"1"}}, reason: "declares or sets trailers"},
		{name: "Vary: *", o: defaults, status: 200, header: http.Header{"Vary": {"Accept, *"}}, reason: "Vary: *"},

		// Form.
		{name: "malformed Cache-Control", o: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=soon"}}, reason: "malformed Cache-Control"},
		{name: "Pragma", o: defaults, status: 200, header: http.Header{"Pragma": {"no-cache"}}, reason: "Pragma: no-cache"},
		{name: "Pragma under Cache-Control", o: defaults, status: 200, header: http.Header{"Pragma": {"no-cache"}, "Cache-Control": {"max-age=30"}}, lifetime: 30 * time.Second},

		// Size.
		{name: "larger than MaxValueSize", o: defaults, status: 200, body: 4 << 10, reason: "larger than the cache's MaxValueSize"},

		// Surrogate-Control.
		{name: "Surrogate-Control no-store", o: Options{Freshness: FreshnessPolicy{TTL: minute}, SurrogateControl: true}, status: 200, header: http.Header{"Surrogate-Control": {"no-store"}}, reason: "Surrogate-Control: no-store"},
		{name: "Surrogate-Control ignored", o: defaults, status: 200, header: http.Header{"Surrogate-Control": {"no-store, max-age=5"}}, lifetime: minute},
		{name: "Surrogate-Control max-age first", o: Options{Freshness: FreshnessPolicy{TTL: minute}, SurrogateControl: true}, status: 200, header: http.Header{"Surrogate-Control": {"max-age=5"}, "Cache-Control": {"s-maxage=60, max-age=60"}}, lifetime: 5 * time.Second},
		{name: "Surrogate-Control for a device", o: Options{Freshness: FreshnessPolicy{TTL: minute}, SurrogateControl: true}, status: 200, header: http.Header{"Surrogate-Control": {"no-store;cdn"}}, lifetime: minute},

		// Age.
		// RFC 9111 5.1: the first member of the first line; an invalid
		// one is ignored; parameters are dropped.
		{name: "Age list: the first member", o: defaults, status: 200, header: http.Header{"Age": {"1, 2"}}, age: time.Second, lifetime: minute},
		{name: "Age list: an old first member", o: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=3600"}, "Age": {"7200, 0"}}, reason: "stale when received (Age or Date)"},
		{name: "Age lines: the first", o: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=3600"}, "Age": {"7200", "0"}}, reason: "stale when received (Age or Date)"},
		{name: "Age lines: the first, young", o: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=3600"}, "Age": {"0", "7200"}}, lifetime: time.Hour},
		{name: "Age non-numeric ignored", o: defaults, status: 200, header: http.Header{"Age": {"abc"}}, lifetime: minute},
		{name: "Age negative ignored", o: defaults, status: 200, header: http.Header{"Age": {"-7200"}}, lifetime: minute},
		{name: "Age fraction ignored", o: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=3600"}, "Age": {"7200.0"}}, lifetime: time.Hour},
		{name: "Age empty ignored", o: defaults, status: 200, header: http.Header{"Age": {""}}, lifetime: minute},
		{name: "Age parameters dropped", o: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=3600"}, "Age": {"7200;foo=bar"}}, reason: "stale when received (Age or Date)"},
		{name: "Age ignored, Date counts", o: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=3600"}, "Age": {"old"}, "Date": {date(-2 * time.Hour)}}, reason: "stale when received (Age or Date)"},
		{name: "Age capped at 2^31 s", o: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=3600"}, "Age": {"99999999999999999999"}}, reason: "stale when received (Age or Date)"},
		{name: "Age", o: defaults, status: 200, header: http.Header{"Age": {"10"}}, age: 10 * time.Second, lifetime: minute},
		{name: "Date in the past", o: defaults, status: 200, header: http.Header{"Date": {date(-20 * time.Second)}}, age: 20 * time.Second, lifetime: minute},

		// The freshness lifetime.
		{name: "s-maxage before max-age", o: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=60, s-maxage=20"}}, lifetime: 20 * time.Second},
		{name: "max-age before Expires", o: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=30"}, "Expires": {date(time.Hour)}}, lifetime: 30 * time.Second},
		{name: "Expires", o: explicit, status: 200, header: http.Header{"Expires": {date(time.Hour)}}, lifetime: time.Hour},
		{name: "Expires in the past", o: defaults, status: 200, header: http.Header{"Expires": {date(-time.Hour)}}, reason: "Expires is not in the future"},
		{name: "Expires invalid", o: defaults, status: 200, header: http.Header{"Expires": {"0"}}, reason: "Expires is not in the future"},
		{name: "TTL", o: defaults, status: 200, lifetime: minute},
		{name: "explicit, none said", o: explicit, status: 200, reason: "no explicit freshness (s-maxage, max-age, Expires)"},
		{name: "heuristic", o: Options{Freshness: FreshnessPolicy{TTL: minute, Explicit: true, Heuristic: 0.1}}, status: 200, header: http.Header{"Date": {date(0)}, "Last-Modified": {date(-10 * time.Hour)}}, lifetime: time.Hour},
		{name: "heuristic not for the status", o: Options{Freshness: FreshnessPolicy{TTL: minute, Heuristic: 0.1}, Statuses: []int{201}}, status: 201, header: http.Header{"Last-Modified": {date(-10 * time.Hour)}}, lifetime: minute},
		{name: "heuristic passed", o: Options{Freshness: FreshnessPolicy{TTL: minute, Heuristic: 0.1}}, status: 200, header: http.Header{"Age": {"7200"}, "Last-Modified": {date(-10 * time.Hour)}}, reason: "heuristic freshness (from Last-Modified) has passed"},
		{name: "max-age=0", o: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=0"}}, reason: "max-age=0"},
		{name: "stale when received", o: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=60"}, "Age": {"60"}}, reason: "stale when received (Age or Date)"},

		// The stale window.
		{name: "StaleTTL", o: Options{Freshness: FreshnessPolicy{TTL: minute, Stale: 30 * time.Second}}, status: 200, lifetime: minute, staleness: 30 * time.Second},
		{name: "stale-if-error is no stale window", o: Options{Freshness: FreshnessPolicy{TTL: minute, Stale: time.Hour}}, status: 200, header: http.Header{"Cache-Control": {"max-age=60, stale-while-revalidate=10, stale-if-error=20"}}, lifetime: minute, staleness: 10 * time.Second},
		{name: "s-maxage drops StaleTTL", o: Options{Freshness: FreshnessPolicy{TTL: minute, Stale: time.Hour}}, status: 200, header: http.Header{"Cache-Control": {"s-maxage=60"}}, lifetime: minute},
		{name: "s-maxage keeps stale-while-revalidate", o: Options{Freshness: FreshnessPolicy{TTL: minute, Stale: time.Hour}}, status: 200, header: http.Header{"Cache-Control": {"s-maxage=60, stale-while-revalidate=15"}}, lifetime: minute, staleness: 15 * time.Second},
		{name: "must-revalidate", o: Options{Freshness: FreshnessPolicy{TTL: minute, Stale: time.Hour}}, status: 200, header: http.Header{"Cache-Control": {"max-age=60, must-revalidate, stale-if-error=20"}}, lifetime: minute},
		{name: "proxy-revalidate", o: Options{Freshness: FreshnessPolicy{TTL: minute, Stale: time.Hour}}, status: 200, header: http.Header{"Cache-Control": {"max-age=60, proxy-revalidate"}}, lifetime: minute},
		{name: "huge options do not overflow", o: Options{Freshness: FreshnessPolicy{TTL: math.MaxInt64 / 2, Stale: math.MaxInt64}}, status: 200, header: http.Header{"Age": {"10"}}, age: 10 * time.Second, lifetime: math.MaxInt64 / 2, staleness: math.MaxInt64 - (math.MaxInt64/2 - 10*time.Second)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := &Middleware{o: tt.o, maxValue: 2 << 10}
			rec := newRecorder(nil, 1<<20)
			for k, vs := range tt.header {
				rec.header[k] = append([]string(nil), vs...)
			}
			rec.status = tt.status
			rec.body.WriteString(strings.Repeat("x", tt.body))
			r, _ := http.NewRequest(http.MethodGet, "http://example.com/", nil)
			reason, age, lifetime, stale := m.storable(r, rec, responded, responded)
			if reason != tt.reason || age != tt.age || lifetime != tt.lifetime || stale != tt.staleness {
				t.Errorf("storable = %q, age %v, lifetime %v, stale %v; want %q, %v, %v, %v",
					reason, age, lifetime, stale, tt.reason, tt.age, tt.lifetime, tt.staleness)
			}
		})
	}
}

// TestBypass_noStore: a request's no-store, in any letter case and in
// any of its Cache-Control fields, bypasses the cache.
func TestBypass_noStore(t *testing.T) {
	m := &Middleware{}
	for _, tt := range []struct {
		name   string
		fields []string
		want   string
	}{
		{"none", nil, ""},
		{"max-age", []string{"max-age=0"}, ""},
		{"no-store", []string{"no-store"}, "no-store"},
		{"upper case, second field", []string{"max-age=0", "No-STORE"}, "no-store"},
		{"in a list", []string{"max-age=0, NO-STORE, no-cache"}, "no-store"},
		{"cut short", []string{"no-stor", "e"}, ""},
		{"not ASCII", []string{"no-ſtore"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := fuzzRequest("/x", "h")
			r.Header["Cache-Control"] = tt.fields
			if got := m.bypass(r); got != tt.want {
				t.Errorf("bypass = %q, want %q", got, tt.want)
			}
		})
	}
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

// TestCacheStatus_ttl: the ttl is the remaining freshness in whole
// seconds, rounded down: negative from the first millisecond past it,
// and none for a response that is never fresh (no-cache).
func TestCacheStatus_ttl(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	for _, tt := range []struct {
		fresh time.Duration
		want  string
	}{
		{1500 * time.Millisecond, "stampede; hit; ttl=1"},
		{999 * time.Millisecond, "stampede; hit; ttl=0"},
		{0, "stampede; hit; ttl=0"},
		{-time.Millisecond, "stampede; hit; ttl=-1"},
		{-1000 * time.Millisecond, "stampede; hit; ttl=-1"},
		{-1001 * time.Millisecond, "stampede; hit; ttl=-2"},
	} {
		resp := &response{Stored: now.Add(-time.Hour).UnixMilli(), FreshUntil: now.Add(tt.fresh).UnixMilli()}
		if got := statusHit.cacheStatus(resp, now); got != tt.want {
			t.Errorf("fresh for %v: %q, want %q", tt.fresh, got, tt.want)
		}
	}
	never := &response{Stored: now.UnixMilli(), FreshUntil: now.UnixMilli()}
	if got := missStatus("stale", 304, true).cacheStatus(never, now); got != "stampede; fwd=stale; fwd-status=304; stored" {
		t.Errorf("a no-cache response: %q", got)
	}
}
