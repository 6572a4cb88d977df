package metrics

import (
	"errors"
	"fmt"
)

// DefaultMaxRoutes is how many distinct routes an adapter's Routes admits
// when its options leave the number at zero.
const DefaultMaxRoutes = 100

// DefaultBuckets returns the default upper bounds, in seconds, of the
// buckets of a duration histogram: 0.5 ms, 1 ms, 2.5 ms, 5 ms, ... 10 s
// (14 bounds), for loads that take from a lookup's time to a slow
// query's. Each call returns a new slice.
func DefaultBuckets() []float64 {
	return []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
}

// CallerBuckets returns the upper bounds of the buckets of a histogram of
// the callers one load answered (cache.Event.Callers): 1, 2, 5, 10, 20,
// 50, 100, 200, 500, 1000 (10 bounds), from a load nobody else asked for
// to a hot key's stampede. Each call returns a new slice.
func CallerBuckets() []float64 {
	return []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}
}

// Validate checks an adapter's options: buckets (the histograms' upper
// bounds; empty means DefaultBuckets) must be in increasing order, and
// maxRoutes (0 means DefaultMaxRoutes) must not be negative. Its errors
// name the option (Buckets, MaxRoutes) and carry no package prefix, for
// the adapter to add its own.
func Validate(buckets []float64, maxRoutes int) error {
	if maxRoutes < 0 {
		return fmt.Errorf("MaxRoutes is %d, must not be negative", maxRoutes)
	}
	for i := 1; i < len(buckets); i++ {
		if buckets[i] <= buckets[i-1] {
			//lint:ignore ST1005 the message begins with the option's name, as users spell it
			return errors.New("Buckets must be in increasing order")
		}
	}
	return nil
}
