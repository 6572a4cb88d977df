package lock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
)

// TestClient_Close: Close ends the subscription a waiter with a Retry
// opened for hand-offs (its connection's goroutine is gone when Close
// returns), and the Client still obtains and releases locks after it.
func TestClient_Close(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		holder, _ := newClient(t, s, nil)
		c, _ := newClient(t, s, nil)
		key := redistest.Key(t, "lock")
		// Obtained with a Retry, so that its release hands the lock over.
		held, err := holder.Obtain(ctx, key, time.Minute, lock.WithRetry(lock.LinearBackoff(time.Second)))
		if err != nil {
			t.Fatal(err)
		}
		before := goleak.IgnoreCurrent()
		got := make(chan error, 1)
		go func() {
			l, err := c.Obtain(ctx, key, time.Minute, lock.WithRetry(lock.LinearBackoff(time.Minute)))
			if err == nil {
				err = l.Release(ctx)
			}
			got <- err
		}()
		waitQueued(t, ctx, s.Client(t), key, 1) // subscribed to its hand-off first
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := redistest.Recv(t, ctx, got, "the waiter"); err != nil {
			t.Fatalf("the waiter: %v", err)
		}
		c.Close()
		if err := goleak.Find(before); err != nil && strings.Contains(err.Error(), "internal/keysub") {
			t.Errorf("a goroutine of the hand-off subscription outlived Close: %v", err)
		}
		l, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatalf("Obtain after Close: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release after Close: %v", err)
		}
		if _, err := c.Obtain(ctx, key, time.Minute); err != nil && !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("Obtain after Close: %v", err)
		}
		c.Close() // again: nothing
	}, redistest.Redis8, redistest.Valkey)
}
