package scenarios

import (
	"math"
	"slices"
	"time"

	"github.com/hotkv/stampede/bench/report"
)

// summarize returns the percentiles of us (microseconds), in
// milliseconds. It sorts a copy.
func summarize(us []int64) report.Latency {
	if len(us) == 0 {
		return report.Latency{}
	}
	s := slices.Clone(us)
	slices.Sort(s)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(s)))) - 1 // nearest rank
		return float64(s[max(0, min(len(s)-1, i))]) / 1000
	}
	return report.Latency{N: len(s), P50: q(0.50), P99: q(0.99), P999: q(0.999), Max: float64(s[len(s)-1]) / 1000}
}

func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// merged adds up pod results.
type merged struct {
	requests, errors int
	firstErr         string
	lat              []int64
}

func merge(rs []podResult) merged {
	var m merged
	for _, r := range rs {
		m.requests += r.Requests
		m.errors += r.Errors
		if m.firstErr == "" {
			m.firstErr = r.FirstErr
		}
		m.lat = append(m.lat, r.Lat...)
	}
	return m
}
