package loader

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// WithTimeout limits each call of fn to d. A d of zero or less returns fn
// unchanged.
func WithTimeout[V any](fn Func[V], d time.Duration) Func[V] {
	if d <= 0 {
		return fn
	}
	return func(ctx context.Context) (V, error) {
		ctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		return fn(ctx)
	}
}

// RetryOptions configure WithRetry. A nil *RetryOptions means defaults.
type RetryOptions struct {
	// Attempts is the total number of calls, the first included.
	// Default: 3.
	Attempts int
	// Backoff is the wait before the second call; it doubles, with jitter,
	// before each later one. Default: 50ms.
	Backoff time.Duration
	// Retryable decides which errors are worth another call. ErrNotFound,
	// *PanicError and context errors never are. Default: every other error.
	Retryable func(error) bool
}

// WithRetry calls fn again after errors that may be transient, waiting
// between calls, until it succeeds, the attempts are used up or ctx ends.
// It returns the last error.
func WithRetry[V any](fn Func[V], opts *RetryOptions) Func[V] {
	attempts, backoff := 3, 50*time.Millisecond
	var retryable func(error) bool
	if opts != nil {
		if opts.Attempts > 0 {
			attempts = opts.Attempts
		}
		if opts.Backoff > 0 {
			backoff = opts.Backoff
		}
		retryable = opts.Retryable
	}
	return func(ctx context.Context) (V, error) {
		var zero V
		wait := backoff
		for i := 1; ; i++ {
			v, err := fn(ctx)
			if err == nil {
				return v, nil
			}
			var pe *PanicError
			if i >= attempts || errors.Is(err, ErrNotFound) || errors.As(err, &pe) ||
				errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
				(retryable != nil && !retryable(err)) {
				return zero, err
			}
			d := wait/2 + rand.N(wait/2+1)
			wait *= 2
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return zero, fmt.Errorf("loader: retry: %w (last error: %v)", ctx.Err(), err)
			case <-t.C:
			}
		}
	}
}
