package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// wakeCounter counts the hand-off events a Client reports.
type wakeCounter struct{ woken, missed, obtained atomic.Int64 }

func (w *wakeCounter) observe(e lock.Event) {
	switch e.Kind {
	case lock.EventWoken:
		w.woken.Add(1)
	case lock.EventWakeMissed:
		w.missed.Add(1)
	case lock.EventObtained:
		w.obtained.Add(1)
	}
}

type obtained struct {
	l   *lock.Lock
	err error
}

// obtainAsync runs Obtain on its own goroutine and reports on the channel.
func obtainAsync(ctx context.Context, c *lock.Client, key string, ttl time.Duration, opts *lock.ObtainOptions) <-chan obtained {
	ch := make(chan obtained, 1)
	go func() {
		l, err := c.Obtain(ctx, key, ttl, opts)
		ch <- obtained{l, err}
	}()
	return ch
}

// waitQueued waits until n waiters are in key's queue.
func waitQueued(tb testing.TB, ctx context.Context, rc redis.UniversalClient, key string, n int64) {
	tb.Helper()
	q, _ := lock.QueueKey(key)
	redistest.WaitFor(tb, ctx, "waiters to queue", func() bool {
		got, _ := rc.ZCard(ctx, q).Result()
		return got == n
	})
}

// never is a back-off no test outlives: a waiter with it is only ever
// handed the lock by notification (or at its deadline, which fails the
// test).
var never = &lock.ObtainOptions{Retry: lock.LinearBackoff(time.Hour)}

// TestHandoff_wokenByRelease: a waiter whose poll would come only after
// the test's deadline gets the lock when it is released, counted by
// EventWoken. Without the hand-off's notification it would wait an hour.
func TestHandoff_wokenByRelease(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		key := redistest.Key(t, "k")
		var w wakeCounter
		holder, rc := newClient(t, s, nil)
		waiter, _ := newClient(t, s, &lock.Options{Observer: w.observe})

		for round := range 3 {
			h, err := holder.Obtain(ctx, key, time.Minute, never)
			if err != nil {
				t.Fatalf("round %d: holder: %v", round, err)
			}
			got := obtainAsync(ctx, waiter, key, time.Minute, never)
			waitQueued(t, ctx, rc, key, 1)
			if err := h.Release(ctx); err != nil {
				t.Fatalf("round %d: release: %v", round, err)
			}
			r := redistest.Recv(t, ctx, got, "the waiter to be handed the lock")
			if r.err != nil {
				t.Fatalf("round %d: waiter: %v", round, r.err)
			}
			if info, err := holder.Inspect(ctx, key); err != nil || info.Token != r.l.Token() || info.TTL < 50*time.Second {
				t.Fatalf("round %d: after hand-off the key holds %+v, %v; want the waiter's token with its full ttl", round, info, err)
			}
			if err := r.l.Release(ctx); err != nil {
				t.Fatalf("round %d: waiter's release: %v", round, err)
			}
			if woken, missed := w.woken.Load(), w.missed.Load(); woken != int64(round+1) || missed != 0 {
				t.Fatalf("round %d: woken %d, missed %d; want %d, 0", round, woken, missed, round+1)
			}
		}
		q, _ := lock.QueueKey(key)
		if n, _ := rc.Exists(ctx, key, q, q+":entries").Result(); n != 0 {
			t.Errorf("%d of the lock and its queue keys left behind", n)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

var _ = errors.Is
