package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
)

// TestClient_Do_keepsAlive runs work that outlasts a short TTL three
// times over. As in TestLock_KeepAlive, a loss while this process was
// stalled, or the server answered late, for a third of its last TTL or more (a
// busy machine) is retried with the TTL doubled, up to three times; a
// loss without such a stall fails.
func TestClient_Do_keepsAlive(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newClient(t, s, nil)
		stalls := newLateness(t, s)
		ttl := 150 * time.Millisecond
		for attempt := 1; ; attempt++ {
			key := redistest.Key(t, "lock")
			start := time.Now()
			var lostAt time.Time // when the work saw its context end
			err := c.Do(ctx, key, ttl, func(ctx context.Context) error {
				select {
				case <-ctx.Done():
					lostAt = time.Now()
					return context.Cause(ctx)
				case <-time.After(3 * ttl):
				}
				l := lock.FromContext(ctx)
				if l == nil || l.Key() != key {
					return errors.New("no lock in the work's context")
				}
				_, err := l.TTL(ctx)
				return err
			})
			if errors.Is(err, lock.ErrLost) {
				if lostAt.IsZero() {
					lostAt = time.Now() // lost after the work: found at release
				}
				if st := stalls.Within(lostAt.Add(-ttl), lostAt); st >= ttl/3 && attempt < 3 {
					t.Logf("attempt %d: lost after %v while the process was stalled %v; again with a TTL of %v",
						attempt, lostAt.Sub(start).Round(time.Millisecond), st.Round(time.Millisecond), 2*ttl)
					ttl *= 2
					continue
				}
				t.Fatalf("Do: %v (stalled in its last TTL: %v)", err, stalls.Within(lostAt.Add(-ttl), lostAt))
			}
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if _, err := c.Inspect(ctx, key); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("after Do: Inspect = %v, want the lock released", err)
			}
			return
		}
	})
}

func TestClient_Do_lostCancelsWork(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, rc := newClient(t, s, nil)
		key := redistest.Key(t, "lock")
		var cause error
		err := c.Do(ctx, key, 2*time.Second, func(wctx context.Context) error {
			if err := rc.Del(ctx, key).Err(); err != nil { // behind the holder's back
				return err
			}
			<-wctx.Done()
			cause = context.Cause(wctx)
			return wctx.Err()
		}, lock.WithRefreshEvery(20*time.Millisecond))
		if !errors.Is(cause, lock.ErrLost) {
			t.Errorf("work's cause = %v, want ErrLost", cause)
		}
		if !errors.Is(err, lock.ErrLost) {
			t.Errorf("Do = %v, want ErrLost", err)
		}
	})
}

func TestClient_Do_heldSkipsFn(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	c, _ := newClient(t, s, nil)
	key := redistest.Key(t, "lock")
	l, err := c.Obtain(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	called := false
	err = c.Do(ctx, key, time.Second, func(context.Context) error { called = true; return nil })
	if !errors.Is(err, lock.ErrNotObtained) || called {
		t.Errorf("Do on a held lock = %v (fn called: %t), want ErrNotObtained without fn", err, called)
	}
}

func TestClient_Do_panicReleases(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	c, _ := newClient(t, s, nil)
	key := redistest.Key(t, "lock")
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_ = c.Do(ctx, key, time.Minute, func(context.Context) error { panic("boom") })
	}()
	if recovered != "boom" {
		t.Fatalf("recovered %v, want the work's panic", recovered)
	}
	if _, err := c.Inspect(ctx, key); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("after a panic: Inspect = %v, want the lock released", err)
	}
}

func TestClient_Obtain_retry(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	c, _ := newClient(t, s, nil)
	key := redistest.Key(t, "lock")

	t.Run("waits for release", func(t *testing.T) {
		l, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l2, err := c.Obtain(ctx, key, time.Minute,
				lock.WithRetry(lock.ExponentialBackoff(time.Millisecond, 10*time.Millisecond)), lock.WithMaxWait(10*time.Second))
			if err == nil {
				err = l2.Release(ctx)
			}
			got <- err
		}()
		// The first owner still holds it when it releases, so the waiter
		// cannot have obtained it earlier.
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Errorf("waiter: %v", err)
		}
	})

	t.Run("MaxWait bounds the wait", func(t *testing.T) {
		l, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		_, err = c.Obtain(ctx, key, time.Minute,
			lock.WithRetry(lock.LinearBackoff(5*time.Millisecond)), lock.WithMaxWait(30*time.Millisecond))
		if !errors.Is(err, lock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Obtain = %v, want plain ErrNotObtained", err)
		}
	})

	t.Run("context ends the wait", func(t *testing.T) {
		l, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		cctx, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() {
			_, err := c.Obtain(cctx, key, time.Hour, lock.WithRetry(lock.LinearBackoff(time.Hour)))
			got <- err
		}()
		cancel()
		err = <-got
		if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Errorf("Obtain = %v, want ErrNotObtained joined with context.Canceled", err)
		}
	})
}

// TestLock_KeepAlive keeps a short lock alive for three TTLs. A loss
// while this process was stalled, or the server answered late, for a
// third of the TTL or more (a busy machine) is not the keep-alive's
// fault: that attempt is retried with the TTL doubled, up to three times;
// a loss without such a stall fails.
func TestLock_KeepAlive(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, rc := newClient(t, s, nil)
		stalls := newLateness(t, s)
		ttl := 150 * time.Millisecond
		for attempt := 1; ; attempt++ {
			key := redistest.Key(t, "lock")
			l, err := c.Obtain(ctx, key, ttl)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			held, stop := l.KeepAlive(ctx, ttl, ttl/5)
			select {
			case <-held.Done():
				lostAt := time.Now()
				_ = stop()
				if st := stalls.Within(lostAt.Add(-ttl), lostAt); st >= ttl/3 && attempt < 3 {
					t.Logf("attempt %d: lost after %v while the process was stalled %v; again with a TTL of %v",
						attempt, lostAt.Sub(start).Round(time.Millisecond), st.Round(time.Millisecond), 2*ttl)
					ttl *= 2
					continue
				}
				t.Fatalf("lost a healthy lock: %v (stalled in its last TTL: %v)", context.Cause(held),
					stalls.Within(lostAt.Add(-ttl), lostAt))
			case <-time.After(3 * ttl): // three TTLs of work
			}
			if _, err := l.TTL(ctx); err != nil {
				// Expired, and the keep-alive had not told yet: as late.
				now := time.Now()
				if st := stalls.Within(now.Add(-ttl), now); errors.Is(err, lock.ErrNotHeld) && st >= ttl/3 && attempt < 3 {
					_ = stop()
					t.Logf("attempt %d: expired while the process was stalled %v; again with a TTL of %v", attempt, st.Round(time.Millisecond), 2*ttl)
					ttl *= 2
					continue
				}
				t.Fatalf("after three TTLs with keep-alive: %v (stalled in its last TTL: %v)", err, stalls.Within(now.Add(-ttl), now))
			}
			if err := rc.Del(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			<-held.Done()
			if cause := stop(); !errors.Is(cause, lock.ErrLost) || !errors.Is(context.Cause(held), lock.ErrLost) {
				t.Errorf("stop() = %v, cause %v; want ErrLost", cause, context.Cause(held))
			}
			return
		}
	})
}

// lateness measures what delays a keep-alive on a busy machine and no
// client can beat: this process's scheduler stalls and the servers' late
// answers (on a Cluster, any node's: they share the machine).
type lateness struct{ sched, trips *redistest.Stalls }

func newLateness(tb testing.TB, s *redistest.Server) lateness {
	tb.Helper()
	return lateness{redistest.MeasureStalls(tb), redistest.MeasureRoundTrips(tb, s.Addrs()...)}
}

// Within returns how long [from, to] was delayed by stalls of either kind
// (the larger sum: a round trip also waits out this process's stalls). A
// keep-alive refreshes once an answer came, so two late answers in a row
// add up against one TTL.
func (l lateness) Within(from, to time.Time) time.Duration {
	return max(l.sched.Within(from, to), l.trips.Within(from, to))
}
