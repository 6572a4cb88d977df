package obs

import (
	"errors"
	"fmt"
)

// Buckets returns b, the upper bounds in seconds of the duration
// histograms' buckets; if b is empty, the default: 0.5 ms, 1 ms, 2.5 ms,
// 5 ms, ... 10 s (14 bounds), for loads that take from a lookup's time to
// a slow query's.
func Buckets(b []float64) []float64 {
	if len(b) == 0 {
		return []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	}
	return b
}

// MaxRoutes returns n, the routes a MiddlewareObserver labels as they
// are; if n is 0, the default: 100.
func MaxRoutes(n int) int {
	if n == 0 {
		return 100
	}
	return n
}

// Validate checks the options Buckets and MaxRoutes; its errors name the
// option and carry no package prefix.
func Validate(buckets []float64, maxRoutes int) error {
	if maxRoutes < 0 {
		return fmt.Errorf("MaxRoutes is %d, must not be negative", maxRoutes)
	}
	for i := 1; i < len(buckets); i++ {
		if buckets[i] <= buckets[i-1] {
			return errors.New("Buckets must be in increasing order")
		}
	}
	return nil
}
