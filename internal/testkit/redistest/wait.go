package redistest

import (
	"context"
	"testing"
	"time"
)

// Recv waits for one value from ch, failing tb if ctx ends first; what
// names the awaited event in the failure.
func Recv[T any](tb testing.TB, ctx context.Context, ch <-chan T, what string) T {
	tb.Helper()
	select {
	case v := <-ch:
		return v
	case <-ctx.Done():
		tb.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// WaitFor polls cond every millisecond until it holds, failing tb when ctx
// ends. It is only for states that nothing but a counter or the server
// shows (a caller has begun waiting for another process); everything else
// is sequenced with channels.
func WaitFor(tb testing.TB, ctx context.Context, what string, cond func() bool) {
	tb.Helper()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			tb.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// Long skips tb under go test -short: a scenario that takes many seconds
// (a failover matrix, a fleet of processes). The README's test command
// runs it; CI's second pass on the other Go release runs with -short.
func Long(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("a long scenario; skipped with -short")
	}
}
