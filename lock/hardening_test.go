package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// obtainFenced obtains key with fencing, releases it and returns its fence.
func obtainFenced(tb testing.TB, ctx context.Context, c *lock.Client, key string) int64 {
	tb.Helper()
	l, err := c.Obtain(ctx, key, time.Minute, &lock.ObtainOptions{Fencing: true})
	if err != nil {
		tb.Fatalf("Obtain %q: %v", key, err)
	}
	if err := l.Release(ctx); err != nil {
		tb.Fatalf("Release %q: %v", key, err)
	}
	return l.Fence()
}

func fenceKey(tb testing.TB, key string) string {
	tb.Helper()
	fk, ok := lock.FenceKey(key)
	if !ok {
		tb.Fatalf("FenceKey(%q) not ok", key)
	}
	return fk
}

// Issue 10, defect 14: a server restarted without persistence comes back
// without the fence counter. The numbers drawn after it must still exceed
// every number drawn before, or a fenced store turns every new holder away.
// Redis 7, Redis 8 and Valkey are killed and started again, empty. The test
// bed cannot restart a cluster, and miniredis keeps its data across a
// restart, so there the counter is deleted, which is what such a restart
// does to it.
func TestLock_Fence_afterRestartWithoutPersistence(t *testing.T) {
	for _, kind := range redistest.Kinds() {
		t.Run(string(kind), func(t *testing.T) {
			ctx := testCtx(t)
			var (
				s    *redistest.Server
				lose func(rc redis.UniversalClient, key string) error
			)
			switch kind {
			case redistest.Redis7, redistest.Redis8, redistest.Valkey:
				s = redistest.Start(t, kind)
				lose = func(redis.UniversalClient, string) error { s.Kill(); return s.Restart() }
			default:
				s = redistest.Shared(t, kind)
				lose = func(rc redis.UniversalClient, key string) error {
					return rc.Del(ctx, fenceKey(t, key)).Err()
				}
			}
			c, rc := newClient(t, s, nil)
			key := "{" + redistest.Key(t, "fenced") + "}"
			var last int64
			for i := range 3 {
				f := obtainFenced(t, ctx, c, key)
				if f <= last {
					t.Fatalf("acquisition %d: fence %d after %d", i+1, f, last)
				}
				last = f
			}
			if err := lose(rc, key); err != nil {
				t.Fatal(err)
			}
			if n, err := rc.Exists(ctx, fenceKey(t, key)).Result(); err != nil || n != 0 {
				t.Fatalf("the counter survived (EXISTS = %d, %v): the test tests nothing", n, err)
			}
			if f := obtainFenced(t, ctx, c, key); f <= last {
				t.Errorf("fence %d after the counter was lost, %d before: numbers went back", f, last)
			}
		})
	}
}

// A replica promoted after missing the last increments holds an older
// counter. Its numbers must still exceed the ones the old master handed
// out, as long as its clock is not behind the old master's (here: the same
// server, so the same clock). The test sets the counter back to the value a
// replica that missed the last two acquisitions would hold.
func TestLock_Fence_laggingCounter(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, rc := newClient(t, s, nil)
		key := "{" + redistest.Key(t, "fenced") + "}"
		fk := fenceKey(t, key)
		obtainFenced(t, ctx, c, key)
		behind, err := rc.Get(ctx, fk).Result()
		if err != nil {
			t.Fatal(err)
		}
		obtainFenced(t, ctx, c, key)
		last := obtainFenced(t, ctx, c, key)
		if err := rc.Set(ctx, fk, behind, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if f := obtainFenced(t, ctx, c, key); f <= last {
			t.Errorf("fence %d from a counter two acquisitions behind, %d before: numbers went back", f, last)
		}
	})
}

// A counter ahead of the server's clock (the clock was set back, or the
// counter came from elsewhere) keeps counting up by one: the clock only
// ever raises the counter.
func TestLock_Fence_counterAheadOfClock(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, rc := newClient(t, s, nil)
		key := "{" + redistest.Key(t, "fenced") + "}"
		ahead := time.Now().Add(24*time.Hour).UnixMicro() + 12345
		if err := rc.Set(ctx, fenceKey(t, key), ahead, 0).Err(); err != nil {
			t.Fatal(err)
		}
		for i := range int64(2) {
			if f := obtainFenced(t, ctx, c, key); f != ahead+1+i {
				t.Errorf("fence %d from a counter at %d, want %d", f, ahead+i, ahead+1+i)
			}
			if got, err := rc.Get(ctx, fenceKey(t, key)).Result(); err != nil || got != strconv.FormatInt(ahead+1+i, 10) {
				t.Errorf("counter %q, %v; want %d", got, err, ahead+1+i)
			}
		}
		// The largest number a counter can reach exactly, then no further.
		last := int64(1<<53 - 1)
		if err := rc.Set(ctx, fenceKey(t, key), last-1, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if f := obtainFenced(t, ctx, c, key); f != last {
			t.Errorf("fence %d from a counter at 2^53-2, want %d", f, last)
		}
	})
}

// A counter key that holds something other than an integer fails the
// obtain with an error, and leaves no lock behind: before, the script took
// the lock and then failed on INCR, and the lock stayed for its full TTL
// with nobody holding it.
func TestLock_Fence_foreignCounter(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, rc := newClient(t, s, nil)
		key := "{" + redistest.Key(t, "fenced") + "}"
		for _, v := range []string{"not a number", "1e3", "9007199254740992", "99999999999999999999"} {
			if err := rc.Set(ctx, fenceKey(t, key), v, 0).Err(); err != nil {
				t.Fatal(err)
			}
			l, err := c.Obtain(ctx, key, time.Minute, &lock.ObtainOptions{Fencing: true})
			if err == nil || errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("counter %q: Obtain = %v, %v; want an error other than ErrNotObtained", v, l, err)
			}
			if _, err := c.Inspect(ctx, key); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("counter %q: after the failed Obtain, Inspect = %v; want ErrNotHeld (no lock left behind)", v, err)
			}
			if got, err := rc.Get(ctx, fenceKey(t, key)).Result(); err != nil || got != v {
				t.Errorf("counter %q: now %q, %v; want it left alone", v, got, err)
			}
			_ = rc.Del(ctx, key).Err()
		}
	})
}

// Fencing numbers are exact integers well beyond what a float64 (Lua's
// number) counts exactly near them, and come back as such.
func TestLock_Fence_matchesCounter(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, rc := newClient(t, s, nil)
		key := "{" + redistest.Key(t, "fenced") + "}"
		for range 3 {
			f := obtainFenced(t, ctx, c, key)
			got, err := rc.Get(ctx, fenceKey(t, key)).Result()
			if err != nil || got != strconv.FormatInt(f, 10) {
				t.Errorf("fence %d, counter %q (%v): want the counter to hold the fence", f, got, err)
			}
		}
	})
}

// blockingRetry reports each Backoff on called and waits an hour, so a test
// knows when Obtain is waiting for a held lock.
type blockingRetry struct{ called chan<- int }

func (r blockingRetry) Backoff(attempt int) time.Duration {
	r.called <- attempt
	return time.Hour
}

// Issue 10, defect 15: a cancelled or expired context is the caller's own
// doing, not "another instance ran it": RunOnce, like Obtain and Do,
// returns errors.Join(ErrNotObtained, ctx.Err()), runs nothing and leaves
// no lock.
func TestClient_RunOnce_cancelled(t *testing.T) {
	cancelled := func(*testing.T) (context.Context, error) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx, context.Canceled
	}
	expired := func(t *testing.T) (context.Context, error) {
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		t.Cleanup(cancel)
		return ctx, context.DeadlineExceeded
	}
	calls := []struct {
		name string
		call func(ctx context.Context, c *lock.Client, key string, fn func(context.Context) error) error
	}{
		{"RunOnce", func(ctx context.Context, c *lock.Client, key string, fn func(context.Context) error) error {
			ran, err := c.RunOnce(ctx, key, time.Minute, fn, nil)
			if ran {
				return fmt.Errorf("ran = true (err %v)", err)
			}
			return err
		}},
		{"RunOnce fenced", func(ctx context.Context, c *lock.Client, key string, fn func(context.Context) error) error {
			ran, err := c.RunOnce(ctx, key, time.Minute, fn, &lock.RunOnceOptions{Fencing: true})
			if ran {
				return fmt.Errorf("ran = true (err %v)", err)
			}
			return err
		}},
		{"Do", func(ctx context.Context, c *lock.Client, key string, fn func(context.Context) error) error {
			return c.Do(ctx, key, time.Minute, fn, nil)
		}},
		{"Obtain", func(ctx context.Context, c *lock.Client, key string, fn func(context.Context) error) error {
			l, err := c.Obtain(ctx, key, time.Minute, nil)
			if l != nil {
				return fmt.Errorf("obtained %v (err %v)", l.Key(), err)
			}
			return err
		}},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		c, _ := newClient(t, s, nil)
		for _, mk := range []struct {
			name string
			ctx  func(*testing.T) (context.Context, error)
		}{{"cancelled", cancelled}, {"expired", expired}} {
			for _, tc := range calls {
				t.Run(mk.name+"/"+tc.name, func(t *testing.T) {
					key := "{" + redistest.Key(t, "job") + "}"
					ctx, want := mk.ctx(t)
					ran := false
					err := tc.call(ctx, c, key, func(context.Context) error { ran = true; return nil })
					if ran || !errors.Is(err, want) || !errors.Is(err, lock.ErrNotObtained) {
						t.Errorf("ran = %t, err = %v; want nothing run and errors.Join(ErrNotObtained, %v)", ran, err, want)
					}
					if _, err := c.Inspect(testCtx(t), key); !errors.Is(err, lock.ErrNotHeld) {
						t.Errorf("Inspect after = %v; want ErrNotHeld (no lock left behind)", err)
					}
				})
			}
		}
	}, redistest.Redis8, redistest.Cluster, redistest.Miniredis)
}

// The control for TestClient_RunOnce_cancelled: a lock held by another
// instance, with the caller's context alive, is still (false, nil).
func TestClient_RunOnce_heldElsewhere(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	c, _ := newClient(t, s, nil)
	key := redistest.Key(t, "job")
	other, err := c.Obtain(ctx, key, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	ran, err := c.RunOnce(ctx, key, time.Minute, func(context.Context) error { return nil }, nil)
	if ran || err != nil {
		t.Errorf("RunOnce = %t, %v; want false, nil while another instance holds the lock", ran, err)
	}
}

// A wait for a held lock ended by the caller's cancellation returns
// errors.Join(ErrNotObtained, context.Canceled), from Obtain and from Do.
func TestClient_Obtain_cancelledWhileWaiting(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	c, _ := newClient(t, s, nil)
	for _, name := range []string{"Obtain", "Do"} {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			key := redistest.Key(t, "held")
			other, err := c.Obtain(ctx, key, time.Minute, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Release(ctx)
			called := make(chan int, 1)
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			opts := lock.ObtainOptions{Retry: blockingRetry{called}, MaxWait: time.Hour}
			errs := make(chan error, 1)
			go func() {
				if name == "Obtain" {
					_, err := c.Obtain(wctx, key, time.Minute, &opts)
					errs <- err
					return
				}
				errs <- c.Do(wctx, key, time.Minute, func(context.Context) error { return errors.New("ran") },
					&lock.DoOptions{ObtainOptions: opts})
			}()
			select {
			case <-called: // the first attempt found the lock held; now it waits
			case <-ctx.Done():
				t.Fatal("no retry was scheduled")
			}
			cancel()
			select {
			case err := <-errs:
				if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
					t.Errorf("err = %v; want errors.Join(ErrNotObtained, context.Canceled)", err)
				}
			case <-ctx.Done():
				t.Fatal("the wait did not end when its context was cancelled")
			}
		})
	}
}

// The failover the package doc warns about, with real replication: the
// replica is promoted after it received the first acquisition but not the
// next two, the last of which still holds the lock on the old master. The
// promoted replica lets a second holder in; its fence must exceed the
// first holder's, so that a fenced store turns the first away. Before,
// the replica's counter had missed the same increments and handed out a
// number the old master had already drawn.
func TestLock_Fence_failoverToLaggingReplica(t *testing.T) {
	for _, kind := range []redistest.Kind{redistest.Redis7, redistest.Redis8, redistest.Valkey} {
		t.Run(string(kind), func(t *testing.T) {
			ctx := testCtx(t)
			master, replica := redistest.Start(t, kind), redistest.Start(t, kind)
			cm, mrc := newClient(t, master, nil)
			cr, rrc := newClient(t, replica, nil)
			// A full sync waits 5s by default for more replicas to join.
			if err := mrc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
				t.Fatal(err)
			}
			host, port, _ := strings.Cut(master.Addrs()[0], ":")
			if err := rrc.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
				t.Fatal(err)
			}
			key := "{" + redistest.Key(t, "fenced") + "}"
			first := obtainFenced(t, ctx, cm, key)
			if n, err := mrc.Do(ctx, "WAIT", 1, 10_000).Int(); err != nil || n != 1 {
				t.Fatalf("WAIT = %d, %v: the replica did not acknowledge the first acquisition", n, err)
			}
			if got, err := rrc.Get(ctx, fenceKey(t, key)).Int64(); err != nil || got != first {
				t.Fatalf("replica's counter %d, %v; want %d", got, err, first)
			}
			if err := rrc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
				t.Fatal(err)
			}
			obtainFenced(t, ctx, cm, key)
			held, err := cm.Obtain(ctx, key, time.Minute, &lock.ObtainOptions{Fencing: true})
			if err != nil {
				t.Fatal(err)
			}
			second, err := cr.Obtain(ctx, key, time.Minute, &lock.ObtainOptions{Fencing: true})
			if err != nil {
				t.Fatalf("Obtain on the promoted replica: %v", err)
			}
			if second.Fence() <= held.Fence() {
				t.Errorf("fences: %d (first), %d held on the old master, %d from the promoted replica: not above the old holder's",
					first, held.Fence(), second.Fence())
			}
		})
	}
}
