package httprule

import (
	"math"
	"net/http"
	"testing"
	"time"
)

// TestStore_rules: every rule of Store, family by family (status,
// Cache-Control directives, sharing, form, size, Surrogate-Control, Age,
// the freshness lifetime and the stale window), gives its reason, or the
// age, lifetime and stale window of a response it stores.
func TestStore_rules(t *testing.T) {
	responded := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	date := func(d time.Duration) string { return responded.Add(d).Format(http.TimeFormat) }
	const minute = time.Minute
	defaults := Policy{TTL: minute}
	explicit := Policy{TTL: minute, Explicit: true}
	for _, tt := range []struct {
		name   string
		p      Policy
		status int
		header http.Header
		body   int // bytes of the stored value
		// want: the reason, or the age, lifetime and stale window
		reason                   string
		age, lifetime, staleness time.Duration
	}{
		// Status.
		{name: "server error", p: defaults, status: 500, reason: "server error"},
		{name: "503", p: explicit, status: 503, header: http.Header{"Cache-Control": {"max-age=60"}}, reason: "server error"},
		{name: "501 is stored", p: defaults, status: 501, lifetime: minute},
		{name: "304", p: defaults, status: 304, reason: "status 304 answers the request's conditions"},
		{name: "412", p: explicit, status: 412, header: http.Header{"Cache-Control": {"max-age=60"}}, reason: "status 412 answers the request's conditions"},
		{name: "206", p: Policy{TTL: minute, Statuses: []int{206}}, status: 206, reason: "status 206 (a partial response)"},
		{name: "ShouldCache no", p: Policy{TTL: minute, ShouldCache: func(int, http.Header) bool { return false }}, status: 200, reason: "ShouldCache said no"},
		{name: "ShouldCache yes", p: Policy{TTL: minute, ShouldCache: func(int, http.Header) bool { return true }}, status: 201, lifetime: minute},
		{name: "status not listed", p: defaults, status: 201, reason: "status 201"},
		{name: "Statuses", p: Policy{TTL: minute, Statuses: []int{201}}, status: 201, lifetime: minute},
		{name: "explicit: any final status", p: explicit, status: 302, header: http.Header{"Cache-Control": {"max-age=60"}}, lifetime: minute},

		// Cache-Control directives.
		{name: "must-understand, unknown status", p: Policy{TTL: minute, Statuses: []int{299}}, status: 299, header: http.Header{"Cache-Control": {"must-understand, max-age=60"}}, reason: "must-understand with unknown status 299"},
		{name: "must-understand, known status", p: defaults, status: 200, header: http.Header{"Cache-Control": {"must-understand, max-age=60"}}, lifetime: minute},
		{name: "must-understand lifts no-store for a known status", p: defaults, status: 200, header: http.Header{"Cache-Control": {"must-understand, no-store, max-age=60"}}, lifetime: minute},
		{name: "must-understand, no-store, unknown status", p: Policy{TTL: minute, Statuses: []int{299}}, status: 299, header: http.Header{"Cache-Control": {"must-understand, no-store, max-age=60"}}, reason: "must-understand with unknown status 299"},
		{name: "no-store alone", p: defaults, status: 200, header: http.Header{"Cache-Control": {"no-store, max-age=60"}}, reason: "no-store"},
		{name: "no-store", p: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=60, no-store"}}, reason: "no-store"},
		{name: "no-store, second line", p: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=60", "NO-STORE"}}, reason: "no-store"},
		{name: "private", p: defaults, status: 200, header: http.Header{"Cache-Control": {"private"}}, reason: "private"},
		{name: "no-cache", p: defaults, status: 200, header: http.Header{"Cache-Control": {"no-cache"}, "Etag": {`"a"`}}, reason: "no-cache (would need revalidation)"},
		{name: "no-cache without a validator", p: Policy{TTL: minute, RevalidateNoCache: true}, status: 200, header: http.Header{"Cache-Control": {"no-cache"}}, reason: "no-cache (would need revalidation)"},
		{name: "no-cache, revalidation off", p: Policy{TTL: minute, RevalidateNoCache: true, Revalidate: -1}, status: 200, header: http.Header{"Cache-Control": {"no-cache"}, "Etag": {`"a"`}}, reason: "no-cache (would need revalidation)"},
		{name: "no-cache revalidated", p: Policy{TTL: minute, RevalidateNoCache: true}, status: 200, header: http.Header{"Cache-Control": {"no-cache, max-age=60"}, "Last-Modified": {date(-time.Hour)}, "Age": {"5"}}, age: 5 * time.Second},

		// Sharing.
		{name: "Set-Cookie", p: defaults, status: 200, header: http.Header{"Set-Cookie": {"a=b"}}, reason: "sets a cookie"},
		{name: "set-cookie in lower case", p: defaults, status: 200, header: http.Header{"set-cookie": {"a=b"}}, reason: "sets a cookie"},
		{name: "Trailer", p: defaults, status: 200, header: http.Header{"Trailer": {"X-A"}}, reason: "declares or sets trailers"},
		{name: "trailer prefix", p: defaults, status: 200, header: http.Header{"trailer:x-a": {"1"}}, reason: "declares or sets trailers"},
		{name: "Vary: *", p: defaults, status: 200, header: http.Header{"Vary": {"Accept, *"}}, reason: "Vary: *"},

		// Form.
		{name: "malformed Cache-Control", p: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=soon"}}, reason: "malformed Cache-Control"},
		{name: "Pragma", p: defaults, status: 200, header: http.Header{"Pragma": {"no-cache"}}, reason: "Pragma: no-cache"},
		{name: "Pragma under Cache-Control", p: defaults, status: 200, header: http.Header{"Pragma": {"no-cache"}, "Cache-Control": {"max-age=30"}}, lifetime: 30 * time.Second},

		// Size.
		{name: "larger than MaxValueSize", p: defaults, status: 200, body: 4 << 10, reason: "larger than the cache's MaxValueSize"},

		// Surrogate-Control.
		{name: "Surrogate-Control no-store", p: Policy{TTL: minute, SurrogateControl: true}, status: 200, header: http.Header{"Surrogate-Control": {"no-store"}}, reason: "Surrogate-Control: no-store"},
		{name: "Surrogate-Control ignored", p: defaults, status: 200, header: http.Header{"Surrogate-Control": {"no-store, max-age=5"}}, lifetime: minute},
		{name: "Surrogate-Control max-age first", p: Policy{TTL: minute, SurrogateControl: true}, status: 200, header: http.Header{"Surrogate-Control": {"max-age=5"}, "Cache-Control": {"s-maxage=60, max-age=60"}}, lifetime: 5 * time.Second},
		{name: "Surrogate-Control for a device", p: Policy{TTL: minute, SurrogateControl: true}, status: 200, header: http.Header{"Surrogate-Control": {"no-store;cdn"}}, lifetime: minute},

		// Age.
		// RFC 9111 5.1: the first member of the first line; an invalid
		// one is ignored; parameters are dropped.
		{name: "Age list: the first member", p: defaults, status: 200, header: http.Header{"Age": {"1, 2"}}, age: time.Second, lifetime: minute},
		{name: "Age list: an old first member", p: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=3600"}, "Age": {"7200, 0"}}, reason: "stale when received (Age or Date)"},
		{name: "Age lines: the first", p: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=3600"}, "Age": {"7200", "0"}}, reason: "stale when received (Age or Date)"},
		{name: "Age lines: the first, young", p: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=3600"}, "Age": {"0", "7200"}}, lifetime: time.Hour},
		{name: "Age non-numeric ignored", p: defaults, status: 200, header: http.Header{"Age": {"abc"}}, lifetime: minute},
		{name: "Age negative ignored", p: defaults, status: 200, header: http.Header{"Age": {"-7200"}}, lifetime: minute},
		{name: "Age fraction ignored", p: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=3600"}, "Age": {"7200.0"}}, lifetime: time.Hour},
		{name: "Age empty ignored", p: defaults, status: 200, header: http.Header{"Age": {""}}, lifetime: minute},
		{name: "Age parameters dropped", p: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=3600"}, "Age": {"7200;foo=bar"}}, reason: "stale when received (Age or Date)"},
		{name: "Age ignored, Date counts", p: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=3600"}, "Age": {"old"}, "Date": {date(-2 * time.Hour)}}, reason: "stale when received (Age or Date)"},
		{name: "Age capped at 2^31 s", p: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=3600"}, "Age": {"99999999999999999999"}}, reason: "stale when received (Age or Date)"},
		{name: "Age", p: defaults, status: 200, header: http.Header{"Age": {"10"}}, age: 10 * time.Second, lifetime: minute},
		{name: "Date in the past", p: defaults, status: 200, header: http.Header{"Date": {date(-20 * time.Second)}}, age: 20 * time.Second, lifetime: minute},

		// The freshness lifetime.
		{name: "s-maxage before max-age", p: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=60, s-maxage=20"}}, lifetime: 20 * time.Second},
		{name: "max-age before Expires", p: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=30"}, "Expires": {date(time.Hour)}}, lifetime: 30 * time.Second},
		{name: "Expires", p: explicit, status: 200, header: http.Header{"Expires": {date(time.Hour)}}, lifetime: time.Hour},
		{name: "Expires in the past", p: defaults, status: 200, header: http.Header{"Expires": {date(-time.Hour)}}, reason: "Expires is not in the future"},
		{name: "Expires invalid", p: defaults, status: 200, header: http.Header{"Expires": {"0"}}, reason: "Expires is not in the future"},
		{name: "TTL", p: defaults, status: 200, lifetime: minute},
		{name: "explicit, none said", p: explicit, status: 200, reason: "no explicit freshness (s-maxage, max-age, Expires)"},
		{name: "heuristic", p: Policy{TTL: minute, Explicit: true, Heuristic: 0.1}, status: 200, header: http.Header{"Date": {date(0)}, "Last-Modified": {date(-10 * time.Hour)}}, lifetime: time.Hour},
		{name: "heuristic not for the status", p: Policy{TTL: minute, Heuristic: 0.1, Statuses: []int{201}}, status: 201, header: http.Header{"Last-Modified": {date(-10 * time.Hour)}}, lifetime: minute},
		{name: "heuristic passed", p: Policy{TTL: minute, Heuristic: 0.1}, status: 200, header: http.Header{"Age": {"7200"}, "Last-Modified": {date(-10 * time.Hour)}}, reason: "heuristic freshness (from Last-Modified) has passed"},
		{name: "max-age=0", p: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=0"}}, reason: "max-age=0"},
		{name: "stale when received", p: defaults, status: 200, header: http.Header{"Cache-Control": {"max-age=60"}, "Age": {"60"}}, reason: "stale when received (Age or Date)"},

		// The stale window.
		{name: "StaleTTL", p: Policy{TTL: minute, Stale: 30 * time.Second}, status: 200, lifetime: minute, staleness: 30 * time.Second},
		{name: "stale-if-error is no stale window", p: Policy{TTL: minute, Stale: time.Hour}, status: 200, header: http.Header{"Cache-Control": {"max-age=60, stale-while-revalidate=10, stale-if-error=20"}}, lifetime: minute, staleness: 10 * time.Second},
		{name: "s-maxage drops StaleTTL", p: Policy{TTL: minute, Stale: time.Hour}, status: 200, header: http.Header{"Cache-Control": {"s-maxage=60"}}, lifetime: minute},
		{name: "s-maxage keeps stale-while-revalidate", p: Policy{TTL: minute, Stale: time.Hour}, status: 200, header: http.Header{"Cache-Control": {"s-maxage=60, stale-while-revalidate=15"}}, lifetime: minute, staleness: 15 * time.Second},
		{name: "must-revalidate", p: Policy{TTL: minute, Stale: time.Hour}, status: 200, header: http.Header{"Cache-Control": {"max-age=60, must-revalidate, stale-if-error=20"}}, lifetime: minute},
		{name: "proxy-revalidate", p: Policy{TTL: minute, Stale: time.Hour}, status: 200, header: http.Header{"Cache-Control": {"max-age=60, proxy-revalidate"}}, lifetime: minute},
		{name: "huge options do not overflow", p: Policy{TTL: math.MaxInt64 / 2, Stale: math.MaxInt64}, status: 200, header: http.Header{"Age": {"10"}}, age: 10 * time.Second, lifetime: math.MaxInt64 / 2, staleness: math.MaxInt64 - (math.MaxInt64/2 - 10*time.Second)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Store takes canonical names: the caller merges those
			// in other letter cases, as this does.
			h := http.Header{}
			for k, vs := range tt.header {
				ck := http.CanonicalHeaderKey(k)
				h[ck] = append(h[ck], vs...)
			}
			p := tt.p
			p.MaxSize = 2 << 10
			v := Store(&Response{Status: tt.status, Header: h, Requested: responded, Responded: responded, Size: tt.body}, &p)
			if v.Reason != tt.reason || v.Age != tt.age || v.Lifetime != tt.lifetime || v.Stale != tt.staleness {
				t.Errorf("Store = %q, age %v, lifetime %v, stale %v; want %q, %v, %v, %v",
					v.Reason, v.Age, v.Lifetime, v.Stale, tt.reason, tt.age, tt.lifetime, tt.staleness)
			}
		})
	}
}
