//go:build unix

package middleware_test

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) the process has used
// so far, for benchmarks on a machine shared with other work, where
// requests per second depend on how much CPU the process got.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
