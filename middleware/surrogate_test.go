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

// TestMiddleware_surrogateControl: with SurrogateControl the response's
// Surrogate-Control max-age comes before Cache-Control's and Expires'
// freshness and its no-store keeps the response out; it never stores what
// Cache-Control forbids, ignores directives targeted at a device, and is
// ignored without the option.
func TestMiddleware_surrogateControl(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range []struct {
		name   string
		on     bool
		header []string
		fresh  time.Duration // 0: not stored
	}{
		{"max-age", true, []string{"Surrogate-Control", "max-age=3600"}, time.Hour},
		{"before Cache-Control", true, []string{"Cache-Control", "max-age=3600", "Surrogate-Control", "max-age=10"}, 10 * time.Second},
		{"no-store", true, []string{"Cache-Control", "max-age=3600", "Surrogate-Control", "no-store"}, 0},
		{"max-age=0", true, []string{"Cache-Control", "max-age=3600", "Surrogate-Control", "max-age=0"}, 0},
		{"Cache-Control no-store wins", true, []string{"Cache-Control", "no-store", "Surrogate-Control", "max-age=3600"}, 0},
		{"Cache-Control private wins", true, []string{"Cache-Control", "private", "Surrogate-Control", "max-age=3600"}, 0},
		{"targeted: ignored", true, []string{"Cache-Control", "max-age=20", "Surrogate-Control", "max-age=3600;cdn"}, 20 * time.Second},
		{"Age counts", true, []string{"Surrogate-Control", "max-age=3600", "Age", "7200"}, 0},
		{"off", false, []string{"Cache-Control", "max-age=20", "Surrogate-Control", "no-store"}, 20 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var renders atomic.Int32
			b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for i := 0; i+1 < len(tt.header); i += 2 {
					w.Header().Set(tt.header[i], tt.header[i+1])
				}
				fmt.Fprintf(w, "r%d", renders.Add(1))
			}), &bedOptions{mw: &middleware.Options{SurrogateControl: tt.on, ExplicitFreshness: true}})
			if tt.fresh == 0 {
				b.get(t, "/sc").check(t, 200, "BYPASS", "r1")
				b.get(t, "/sc").check(t, 200, "BYPASS", "r2")
				return
			}
			b.get(t, "/sc").check(t, 200, "MISS", "r1")
			b.waitStored(t, "/sc", "r1")
			// The server drops the entry when it goes stale.
			if got := b.ttl(t, "/sc"); got > tt.fresh || got < tt.fresh-5*time.Second {
				t.Errorf("server TTL = %v, want %v", got, tt.fresh)
			}
			b.clock.Advance(tt.fresh - time.Second)
			b.get(t, "/sc").check(t, 200, "HIT", "r1")
		})
	}
}
