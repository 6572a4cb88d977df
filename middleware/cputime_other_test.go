//go:build !unix

package middleware_test

import "time"

// processCPU is not measured here: benchmarks report no CPU time.
func processCPU() time.Duration { return 0 }
