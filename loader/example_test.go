package loader_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hotkv/stampede/loader"
)

// A loader whose first two calls fail is called a third time. The wrapped
// loader is what a program passes to cache.GetOrLoad.
func ExampleWithRetry() {
	calls := 0
	load := func(ctx context.Context) (string, error) {
		calls++
		if calls < 3 {
			return "", errors.New("connection reset")
		}
		return "Ada", nil
	}

	v, err := loader.WithRetry(load, &loader.RetryOptions{
		Attempts: 5,
		Backoff:  time.Millisecond, // then 2ms, 4ms, ..., with jitter
	})(context.Background())
	fmt.Println(v, err, "after", calls, "calls")
	// Output: Ada <nil> after 3 calls
}

// ErrNotFound is an answer, not a failure: it is returned at once.
func ExampleWithRetry_notFound() {
	calls := 0
	load := func(ctx context.Context) (string, error) {
		calls++
		return "", loader.ErrNotFound
	}

	_, err := loader.WithRetry(load, nil)(context.Background())
	fmt.Println(errors.Is(err, loader.ErrNotFound), "after", calls, "call")
	// Output: true after 1 call
}

// WithTimeout outside WithRetry bounds all the attempts together. (Inside,
// it would bound each one, but WithRetry does not retry a context error.)
func ExampleWithTimeout() {
	calls := 0
	slow := func(ctx context.Context) (string, error) {
		calls++
		select {
		case <-ctx.Done(): // a loader returns when its context ends
			return "", ctx.Err()
		case <-time.After(time.Minute):
			return "too late", nil
		}
	}

	load := loader.WithTimeout(loader.WithRetry(slow, nil), 20*time.Millisecond)
	_, err := load(context.Background())
	fmt.Println(err, "after", calls, "call")
	// Output: context deadline exceeded after 1 call
}
