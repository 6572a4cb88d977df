package middleware_test

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redistest"
)

// TestMiddleware_ageAndDate: a response's age when received (RFC 9111
// 4.2.3: the larger of its Age field and the time since its Date) counts
// against its freshness and in the Age of every answer; an Age that is
// not one non-negative integer makes it stale; the origin's Date is
// served as it was, and a response without one gets the time it was
// received. Before, Age and Date were dropped: a response whose Age
// exceeded its max-age was stored and served as fresh.
func TestMiddleware_ageAndDate(t *testing.T) {
	date := func(c *settableClock, d time.Duration) string { return c.Now().Add(d).UTC().Format(http.TimeFormat) }
	type field struct {
		name string
		at   time.Duration // a date this far from the clock, if value is ""
		val  string
	}
	tests := []struct {
		name    string
		fields  []field
		stored  bool
		age     int           // Age of the first answer, when stored
		dateAt  time.Duration // the Date answers carry, from the clock at the render
		advance time.Duration // then the clock moves this far, and a hit's Age is age+advance
	}{
		{"Age over max-age", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "7200"}}, false, 0, 0, 0},
		{"Age counted", []field{{"Cache-Control", 0, "max-age=600"}, {"Age", 0, "30"}}, true, 30, 0, 5 * time.Second},
		{"Age with Expires", []field{{"Expires", 30 * time.Hour, ""}, {"Date", 0, ""}, {"Age", 0, "30"}}, true, 30, 0, 5 * time.Second},
		{"Date kept and counted", []field{{"Cache-Control", 0, "max-age=600"}, {"Date", -5 * time.Second, ""}}, true, 5, -5 * time.Second, 10 * time.Second},
		{"no Date: the render's", []field{{"Cache-Control", 0, "max-age=600"}}, true, 0, 0, 10 * time.Second},
		{"Expires less Date, slow Date", []field{{"Date", -10 * time.Second, ""}, {"Expires", 10 * time.Second, ""}, {"Age", 0, "25"}}, false, 0, 0, 0},
		{"Expires less Date, fast Date", []field{{"Date", 10 * time.Second, ""}, {"Expires", 20 * time.Second, ""}, {"Age", 0, "15"}}, false, 0, 0, 0},
		{"Age not a number", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "abc"}}, false, 0, 0, 0},
		{"Age negative", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "-7200"}}, false, 0, 0, 0},
		{"Age a fraction", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "7200.0"}}, false, 0, 0, 0},
		{"Age a list", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "0, 0"}}, false, 0, 0, 0},
		{"Age twice", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "0"}, {"Age", 0, "0"}}, false, 0, 0, 0},
		{"Age with a parameter", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "0;foo=1"}}, false, 0, 0, 0},
		{"Age huge", []field{{"Cache-Control", 0, "max-age=3600"}, {"Age", 0, "99999999999999999999999"}}, false, 0, 0, 0},
	}
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			renders := 0
			var b *testBed
			b = newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				renders++
				for _, f := range tt.fields {
					v := f.val
					if v == "" {
						v = date(b.clock, f.at)
					}
					w.Header().Add(f.name, v)
				}
				fmt.Fprintf(w, "r%d", renders)
			}), nil)
			wantDate := date(b.clock, tt.dateAt)
			if !tt.stored {
				b.get(t, "/a").check(t, 200, "BYPASS", "r1")
				b.get(t, "/a").check(t, 200, "BYPASS", "r2")
				return
			}
			miss := b.get(t, "/a")
			miss.check(t, 200, "MISS", "r1")
			b.waitStored(t, "/a", "r1")
			b.clock.Advance(tt.advance)
			hit := b.get(t, "/a")
			hit.check(t, 200, "HIT", "r1")
			for _, a := range []struct {
				r   reply
				age int
			}{{miss, tt.age}, {hit, tt.age + int(tt.advance/time.Second)}} {
				if got := a.r.header.Values("Age"); len(got) != 1 || got[0] != strconv.Itoa(a.age) {
					t.Errorf("%s: Age %q, want %d", a.r.cache(), got, a.age)
				}
				if got := a.r.header.Values("Date"); len(got) != 1 || got[0] != wantDate {
					t.Errorf("%s: Date %q, want %s", a.r.cache(), got, wantDate)
				}
			}
		})
	}
}
