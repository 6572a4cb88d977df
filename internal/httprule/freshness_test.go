package httprule

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzHeuristic: for any Last-Modified and Date (several fields too) and
// any fraction New accepts, the heuristic lifetime is between 0 and the
// cap, and there is one only when Last-Modified is not after Date.
func FuzzHeuristic(f *testing.F) {
	for _, seed := range []struct {
		lm, date string
		fraction float64
		limit    int64
	}{
		{"Mon, 02 Jan 2006 15:04:05 GMT", "Tue, 03 Jan 2006 15:04:05 GMT", 0.1, 0},
		{"Mon, 01 Jan 0001 00:00:00 GMT", "Fri, 31 Dec 9999 23:59:59 GMT", 1, math.MaxInt64},
		{"Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 01 Jan 0001 00:00:00 GMT", 1, 0},
		{"Monday, 02-Jan-06 15:04:05 GMT", "", 0.5, int64(time.Hour)},
		{"Mon Jan  2 15:04:05 2006", "yesterday", 0.1, 1},
		{"0", "0", 0.1, 0},
		{"", "", 0.1, 0},
	} {
		f.Add(seed.lm, seed.date, seed.fraction, seed.limit)
	}
	f.Fuzz(func(t *testing.T, lm, date string, fraction float64, limit int64) {
		// The fractions and caps middleware.New accepts.
		p := Policy{Heuristic: fraction, HeuristicMaxAge: time.Duration(limit)}
		if !(fraction > 0 && fraction <= 1) || limit < 0 {
			return
		}
		h := http.Header{"Last-Modified": {lm}}
		if date != "" {
			h["Date"] = []string{date}
		}
		responded := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		got, ok := p.heuristic(http.StatusOK, false, h, responded)
		max := p.HeuristicMaxAge
		if max == 0 {
			max = 24 * time.Hour
		}
		if got < 0 || got > max {
			t.Fatalf("Last-Modified %q Date %q fraction %v: lifetime %v outside [0, %v]", lm, date, fraction, got, max)
		}
		if !ok && got != 0 {
			t.Fatalf("no heuristic, but lifetime %v", got)
		}
		// The names in any letter case, as parseHTTPDate documents:
		// http.ParseTime already reads the day's and the month's so, but
		// not the zone's.
		l, errLM := http.ParseTime(anyCaseGMT(strings.TrimSpace(lm)))
		if ok && errLM != nil {
			t.Fatalf("heuristic from an invalid Last-Modified %q", lm)
		}
		at := responded
		if d, err := http.ParseTime(anyCaseGMT(strings.TrimSpace(date))); err == nil {
			at = d
		}
		if ok && l.After(at) {
			t.Fatalf("heuristic from Last-Modified %q after %v", lm, at)
		}
	})
}

// anyCaseGMT spells a trailing zone "GMT" in any letter case as "GMT".
func anyCaseGMT(v string) string {
	if n := len(v); n >= 3 && strings.EqualFold(v[n-3:], "GMT") {
		return v[:n-3] + "GMT"
	}
	return v
}
