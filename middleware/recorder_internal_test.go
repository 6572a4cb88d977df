package middleware

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
)

// TestRecorder_flush: a flush passes the response through (and flushes
// it) only when it cannot be stored anyway, as its status and header
// stand at the flush; otherwise it is a hint, and the recorder goes on
// recording.
func TestRecorder_flush(t *testing.T) {
	defaults := Options{Freshness: FreshnessPolicy{Fresh: time.Minute}}
	explicit := Options{Freshness: FreshnessPolicy{Fresh: time.Minute, Explicit: true}}
	revalidating := Options{Freshness: FreshnessPolicy{Fresh: time.Minute, RevalidateNoCache: true}}
	for _, tt := range []struct {
		name   string
		o      Options
		status int // 0: none written before the flush
		header http.Header
		reason string // "": kept recording
	}{
		{name: "max-age", o: defaults, header: http.Header{"Cache-Control": {"max-age=60"}}},
		{name: "nothing said, with a TTL", o: defaults},
		{name: "404", o: defaults, status: 404},
		{name: "no-cache with a validator, revalidated", o: revalidating, header: http.Header{"Cache-Control": {"no-cache"}, "Etag": {`"v1"`}}},
		{name: "event stream", o: defaults, header: http.Header{"Content-Type": {"text/event-stream"}}, reason: "an event stream (text/event-stream)"},
		{name: "event stream with max-age", o: defaults, header: http.Header{"Content-Type": {"text/event-stream"}, "Cache-Control": {"max-age=60"}}, reason: "an event stream (text/event-stream)"},
		{name: "event stream, parameters and case", o: defaults, header: http.Header{"content-type": {" Text/Event-Stream ; charset=utf-8"}}, reason: "an event stream (text/event-stream)"},
		{name: "not an event stream", o: defaults, header: http.Header{"Content-Type": {"text/event-streams"}}},
		{name: "no-store", o: defaults, header: http.Header{"Cache-Control": {"max-age=60, no-store"}}, reason: "no-store"},
		{name: "private", o: defaults, header: http.Header{"Cache-Control": {"private, max-age=60"}}, reason: "private"},
		{name: "no-cache without a validator", o: revalidating, header: http.Header{"Cache-Control": {"no-cache"}}, reason: "no-cache (would need revalidation)"},
		{name: "cookie, in lower case", o: defaults, header: http.Header{"set-cookie": {"a=b"}}, reason: "sets a cookie"},
		{name: "Vary: *", o: defaults, header: http.Header{"Vary": {"*"}}, reason: "Vary: *"},
		{name: "server error", o: defaults, status: 500, reason: "server error"},
		{name: "status not storable", o: defaults, status: 201, reason: "status 201"},
		{name: "Surrogate-Control: no-store", o: Options{Freshness: FreshnessPolicy{Fresh: time.Minute}, SurrogateControl: true}, header: http.Header{"Surrogate-Control": {"no-store"}}, reason: "Surrogate-Control: no-store"},
		{name: "targeted no-store", o: Options{Freshness: FreshnessPolicy{Fresh: time.Minute}, Targeted: []string{"CDN-Cache-Control"}}, header: http.Header{"Cache-Control": {"max-age=60"}, "Cdn-Cache-Control": {"no-store"}}, reason: "no-store"},
		{name: "no freshness, explicit", o: explicit, reason: "no explicit freshness (s-maxage, max-age, Expires)"},
		{name: "max-age=0", o: defaults, header: http.Header{"Cache-Control": {"max-age=0"}}, reason: "max-age=0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m := &Middleware{o: tt.o, rules: tt.o.rules(1 << 20), maxValue: 1 << 20, now: time.Now}
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodGet, "http://example.com/", nil)
			rec := newRecorder(w, 1<<20)
			rec.refuses = func() string { return m.flushRefusal(r, rec) }
			for k, vs := range tt.header {
				rec.Header()[k] = append([]string(nil), vs...)
			}
			if tt.status != 0 {
				rec.WriteHeader(tt.status)
			}
			_, _ = rec.Write([]byte("first;"))
			rec.Flush()
			_, _ = rec.Write([]byte("second"))
			if rec.passing != (tt.reason != "") || rec.reason != tt.reason {
				t.Fatalf("after the flush: passing %v, reason %q; want reason %q", rec.passing, rec.reason, tt.reason)
			}
			if tt.reason == "" {
				if w.Flushed || w.Body.Len() > 0 || rec.body.String() != "first;second" {
					t.Errorf("kept: the client got %q (flushed %v), recorded %q", w.Body, w.Flushed, rec.body.String())
				}
				if len(tt.header) > 0 && !maps.EqualFunc(rec.header, tt.header, slices.Equal) {
					t.Errorf("the handler's header changed to %v", rec.header)
				}
				return
			}
			if !w.Flushed || w.Body.String() != "first;second" || rec.body.Len() > 0 {
				t.Errorf("streamed: the client got %q (flushed %v), recorded %q", w.Body, w.Flushed, rec.body.String())
			}
		})
	}
}
