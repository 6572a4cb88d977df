package lock

import (
	"math/rand/v2"
	"time"
)

// RetryStrategy says how long to wait before the next attempt to obtain a
// held lock. Backoff is called with the number of attempts made so far
// (1 after the first) and returns the wait, or a negative duration to stop
// trying. Implementations must be safe for concurrent use; the ones here
// are stateless.
type RetryStrategy interface {
	Backoff(attempt int) time.Duration
}

// noRetry tries once: what a nil strategy means, where LimitRetry needs
// one to wrap.
type noRetry struct{}

func (noRetry) Backoff(int) time.Duration { return -1 }

type linear time.Duration

func (d linear) Backoff(int) time.Duration { return time.Duration(d) }

// LinearBackoff waits d between attempts. d below 1ms is raised to 1ms.
func LinearBackoff(d time.Duration) RetryStrategy {
	return linear(max(d, time.Millisecond))
}

type exponential struct{ min, max time.Duration }

func (e exponential) Backoff(attempt int) time.Duration {
	ceil := e.min
	for i := 1; i < attempt && ceil < e.max; i++ {
		ceil *= 2
	}
	ceil = min(ceil, e.max)
	// Full jitter: waiters that collided once do not collide again in step.
	return e.min/2 + rand.N(ceil-e.min/2+1)
}

// ExponentialBackoff doubles the wait from min up to max, with jitter:
// each wait is drawn uniformly between min/2 and the current ceiling.
// min below 1ms is raised to 1ms; max below min is raised to min.
func ExponentialBackoff(min, max time.Duration) RetryStrategy {
	if min < time.Millisecond {
		min = time.Millisecond
	}
	if max < min {
		max = min
	}
	return exponential{min, max}
}

type limited struct {
	s RetryStrategy
	n int
}

func (l limited) Backoff(attempt int) time.Duration {
	if attempt > l.n {
		return -1
	}
	return l.s.Backoff(attempt)
}

// LimitRetry makes at most n retries with s.
func LimitRetry(s RetryStrategy, n int) RetryStrategy {
	if s == nil {
		s = noRetry{}
	}
	return limited{s, n}
}
