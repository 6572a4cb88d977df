package middleware_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/middleware"
)

// TestMiddleware_explicitFreshness: with ExplicitFreshness only responses
// that say how long they are fresh are stored; without it (the default)
// the others are fresh for TTL, as before.
func TestMiddleware_explicitFreshness(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range []struct {
		name     string
		explicit bool
		header   []string // name, value pairs; "@expires" is a date 30s on
		stored   bool
	}{
		{"nothing said", true, nil, false},
		{"public only", true, []string{"Cache-Control", "public"}, false},
		{"Last-Modified only", true, []string{"Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT"}, false},
		{"max-age", true, []string{"Cache-Control", "max-age=30"}, true},
		{"s-maxage", true, []string{"Cache-Control", "public, s-maxage=30"}, true},
		{"Expires", true, []string{"Expires", "@expires"}, true},
		{"default: TTL", false, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			var b *testBed
			b = newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for i := 0; i+1 < len(tt.header); i += 2 {
					v := tt.header[i+1]
					if v == "@expires" {
						v = b.clock.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat)
					}
					w.Header().Set(tt.header[i], v)
				}
				fmt.Fprintf(w, "r%d", renders.Add(1))
			}), &bedOptions{mw: &middleware.Options{ExplicitFreshness: tt.explicit, TTL: time.Hour}})
			if !tt.stored {
				b.get(t, "/x").check(t, 200, "BYPASS", "r1")
				b.get(t, "/x").check(t, 200, "BYPASS", "r2")
				return
			}
			b.get(t, "/x").check(t, 200, "MISS", "r1")
			b.waitStored(t, "/x", "r1")
			b.get(t, "/x").check(t, 200, "HIT", "r1")
		})
	}
}

// TestMiddleware_explicitFreshnessStatuses: with ExplicitFreshness a
// response that says how long it is fresh is stored whatever its final
// status (RFC 9111 3), except 206 and the server errors but 501, and a
// status net/http does not know is not stored with must-understand; by
// default only the Statuses' list is.
func TestMiddleware_explicitFreshnessStatuses(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range []struct {
		status   int
		cc       string
		explicit bool
		stored   bool
	}{
		{302, "max-age=60", true, true},
		{302, "max-age=60", false, false},
		{307, "max-age=60", true, true},
		{400, "max-age=60", true, true},
		{299, "max-age=60", true, true},
		{299, "max-age=60, must-understand", true, false},
		{200, "max-age=60, must-understand", true, true},
		{206, "max-age=60", true, false},
		{500, "max-age=60", true, false},
		{503, "max-age=60, public", true, false},
		{599, "max-age=60", true, false},
		{501, "max-age=60", true, true},
	} {
		t.Run(fmt.Sprintf("%d %s explicit=%v", tt.status, tt.cc, tt.explicit), func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", tt.cc)
				w.Header().Set("Location", "/elsewhere")
				w.WriteHeader(tt.status)
				fmt.Fprintf(w, "r%d", renders.Add(1))
			}), &bedOptions{mw: &middleware.Options{ExplicitFreshness: tt.explicit}})
			if !tt.stored {
				b.get(t, "/s").check(t, tt.status, "BYPASS", "r1")
				b.get(t, "/s").check(t, tt.status, "BYPASS", "r2")
				return
			}
			b.get(t, "/s").check(t, tt.status, "MISS", "r1")
			b.waitStored(t, "/s", "r1")
			b.get(t, "/s").check(t, tt.status, "HIT", "r1")
		})
	}
}
