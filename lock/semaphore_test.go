package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
)

// semKey is a semaphore key of the test's own on a shared server.
func semKey(t *testing.T) string { return "sem:" + t.Name() }

func newSemaphore(tb testing.TB, c *lock.Client, key string, limit int, ttl time.Duration, opts ...lock.SemaphoreOption) *lock.Semaphore {
	tb.Helper()
	s, err := c.Semaphore(key, limit, ttl, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// Many acquirers on several clients (as processes) never hold more than
// the limit at once, and do hold the limit: the first holders keep their
// permits until the limit is reached.
func TestSemaphore_Acquire_neverMoreThanLimit(t *testing.T) {
	const limit, clients, perClient = 3, 3, 8
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		key := semKey(t)
		var cur, peak atomic.Int64
		full := make(chan struct{})
		var fullOnce sync.Once
		errs := make(chan error, clients*perClient)
		var wg sync.WaitGroup
		for range clients {
			c, _ := newClient(t, s, nil)
			t.Cleanup(c.Close)
			sem := newSemaphore(t, c, key, limit, 10*time.Second)
			for range perClient {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p, err := sem.Acquire(ctx)
					if err != nil {
						errs <- err
						return
					}
					n := cur.Add(1)
					for {
						old := peak.Load()
						if n <= old || peak.CompareAndSwap(old, n) {
							break
						}
					}
					if n == limit {
						fullOnce.Do(func() { close(full) })
					}
					select {
					case <-full:
					case <-ctx.Done():
					}
					cur.Add(-1)
					if err := p.Release(ctx); err != nil {
						errs <- fmt.Errorf("release: %w", err)
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if got := peak.Load(); got != limit {
			t.Errorf("at most %d permits were held at once, want exactly %d", got, limit)
		}
	})
}

// A release wakes a waiter at once: its poll interval is an hour and the
// held permit's TTL a minute, and the release comes after the waiter's
// last attempt (SemArmed), so nothing but the release's notice lets it in.
func TestSemaphore_Release_wakesWaiter(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		key := semKey(t)
		a, _ := newClient(t, s, nil)
		b, _ := newClient(t, s, nil)
		t.Cleanup(a.Close)
		t.Cleanup(b.Close)
		semA := newSemaphore(t, a, key, 1, time.Minute)
		semB := newSemaphore(t, b, key, 1, time.Minute, lock.WithPollInterval(time.Hour))
		held, err := semA.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		released := make(chan struct{})
		got := make(chan error, 1)
		go func() {
			p, err := semB.Acquire(ctx)
			select {
			case <-released:
			default:
				err = errors.Join(err, errors.New("the waiter got a permit before the release"))
			}
			if err == nil {
				err = p.Release(ctx)
			}
			got <- err
		}()
		redistest.WaitFor(t, ctx, "the waiter to wait for a notice", func() bool { return lock.SemArmed(b, semB) == 1 })
		close(released)
		if err := held.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := redistest.Recv(t, ctx, got, "the waiter's permit"); err != nil {
			t.Fatal(err)
		}
	})
}

// A permit that is neither released nor refreshed expires after its TTL,
// and a waiter takes its place (woken by the expiry the full semaphore
// reported, not by its hour-long poll); the expired permit's Refresh and
// Release then find it not held.
func TestSemaphore_expiredPermitReclaimed(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		key := semKey(t)
		c, _ := newClient(t, s, nil)
		t.Cleanup(c.Close)
		short := newSemaphore(t, c, key, 1, 50*time.Millisecond)
		sem := newSemaphore(t, c, key, 1, time.Minute, lock.WithPollInterval(time.Hour))
		dead, err := short.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := sem.TryAcquire(ctx); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("TryAcquire while the permit is held: %v, want ErrNotObtained", err)
		}
		p, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := dead.Refresh(ctx, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Refresh of the expired permit: %v, want ErrNotHeld", err)
		}
		if err := dead.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Release of the expired permit: %v, want ErrNotHeld", err)
		}
		if err := p.Refresh(ctx, time.Minute); err != nil {
			t.Errorf("Refresh of the held permit: %v", err)
		}
		if err := p.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
		if err := p.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("second Release: %v, want ErrNotHeld", err)
		}
		// Expired permits also leave to TryAcquire, which WaitFor
		// repeats until the short permit is gone.
		if _, err := short.TryAcquire(ctx); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, ctx, "the short permit to expire", func() bool {
			q, err := sem.TryAcquire(ctx)
			if err == nil {
				_ = q.Release(ctx)
			}
			return err == nil
		})
	})
}

// A waiter whose ctx is cancelled returns at once, with an error naming
// the semaphore and matching ErrNotObtained and context.Canceled.
func TestSemaphore_Acquire_cancelled(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		key := semKey(t)
		c, _ := newClient(t, s, nil)
		t.Cleanup(c.Close)
		sem := newSemaphore(t, c, key, 1, time.Minute, lock.WithPollInterval(time.Hour))
		held, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = held.Release(ctx) }()
		wctx, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() {
			_, err := sem.Acquire(wctx)
			got <- err
		}()
		redistest.WaitFor(t, ctx, "the waiter to listen for releases", func() bool { return lock.SemArmed(c, sem) == 1 })
		cancel()
		err = redistest.Recv(t, ctx, got, "the cancelled Acquire")
		if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), key) {
			t.Errorf("Acquire with a cancelled ctx: %v, want ErrNotObtained and context.Canceled naming %q", err, key)
		}
		if _, err := sem.Acquire(wctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Acquire with an ended ctx: %v, want context.Canceled", err)
		}
	})
}

// KeepAlive keeps a short permit past its TTL: another acquirer finds the
// semaphore full after more than a TTL's worth of refreshes. A permit lost
// while this process or the server was stalled for a third of the TTL is
// tried again with twice the TTL (as TestLock_KeepAlive does); a loss
// without such a stall fails.
func TestPermit_KeepAlive(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		var refreshed atomic.Int64
		c, _ := newClient(t, s, &lock.Options{Observer: func(e lock.Event) {
			if e.Kind == lock.EventRefreshed {
				refreshed.Add(1)
			}
		}})
		t.Cleanup(c.Close)
		stalls := newLateness(t, s)
		ttl := 150 * time.Millisecond
		for attempt := 1; ; attempt++ {
			sem := newSemaphore(t, c, fmt.Sprintf("%s:%d", semKey(t), attempt), 1, ttl)
			p, err := sem.TryAcquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			refreshed.Store(0)
			held, stop := p.KeepAlive(ctx, ttl, ttl/3)
			// Four refreshes, ttl/3 apart: more than a ttl since the acquire.
			redistest.WaitFor(t, ctx, "four refreshes or a loss", func() bool { return refreshed.Load() >= 4 || held.Err() != nil })
			q, err := sem.TryAcquire(ctx)
			if held.Err() != nil || err == nil {
				lostAt := time.Now()
				_ = stop()
				if q != nil {
					_ = q.Release(ctx)
				}
				if st := stalls.Within(lostAt.Add(-ttl), lostAt); st >= ttl/3 && attempt < 3 {
					t.Logf("attempt %d: lost while stalled %v; again with a TTL of %v", attempt, st.Round(time.Millisecond), 2*ttl)
					ttl *= 2
					continue
				}
				t.Fatalf("permit kept alive was lost (TryAcquire: %v, cause %v; stalled in its last TTL: %v)",
					err, context.Cause(held), stalls.Within(lostAt.Add(-ttl), lostAt))
			}
			if !errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("TryAcquire while the permit is kept alive: %v, want ErrNotObtained", err)
			}
			if err := stop(); err != nil || held.Err() == nil {
				t.Errorf("stop: %v (context %v), want nil and a cancelled context", err, held.Err())
			}
			if err := p.Release(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
			return
		}
	})
}

func TestClient_Semaphore_invalid(t *testing.T) {
	s := redistest.Shared(t, redistest.Miniredis)
	c, _ := newClient(t, s, nil)
	tests := []struct {
		name  string
		key   string
		limit int
		ttl   time.Duration
		opts  []lock.SemaphoreOption
		want  string
	}{
		{name: "empty key", key: "", limit: 1, ttl: time.Second, want: "key is empty"},
		{name: "brace", key: "a}b", limit: 1, ttl: time.Second, want: `"a}b"`},
		{name: "zero limit", key: "k", limit: 0, ttl: time.Second, want: "limit 0"},
		{name: "short ttl", key: "k", limit: 1, ttl: time.Microsecond, want: "ttl 1µs"},
		{name: "short poll", key: "k", limit: 1, ttl: time.Second, opts: []lock.SemaphoreOption{lock.WithPollInterval(0)}, want: "WithPollInterval 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Semaphore(tt.key, tt.limit, tt.ttl, tt.opts...)
			if !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Semaphore: %v, want ErrInvalid naming %s", err, tt.want)
			}
		})
	}
	sem := newSemaphore(t, c, "sem:invalid", 1, time.Second)
	p, err := sem.TryAcquire(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Refresh(testCtx(t), 0); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Refresh(0): %v, want ErrInvalid", err)
	}
	_ = p.Release(testCtx(t))
}

// workerSemHold takes a permit, keeps it alive, says "held" and then
// blocks until killed.
func workerSemHold() int {
	c := workerClient()
	ttl, _ := time.ParseDuration(workerEnv("TTL"))
	sem, err := c.Semaphore(workerEnv("KEY"), 1, ttl)
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	p, err := sem.TryAcquire(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	p.KeepAlive(context.Background(), ttl, 0)
	fmt.Println("held")
	select {}
}

// A permit of a killed process (kept alive until then) frees its place
// after its TTL: a waiter whose poll is an hour gets it, woken by the
// expiry the full semaphore reported.
func TestSemaphore_killedHolder(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newClient(t, s, nil)
		t.Cleanup(c.Close)
		key := redistest.Key(t, "sem")
		p := redistest.Spawn(t, s, "semhold", "LOCKTEST_KEY="+key, "LOCKTEST_TTL=1s")
		if line := redistest.Recv(t, ctx, p.Lines(), "the worker's permit"); line != "held" {
			t.Fatalf("worker said %q", line)
		}
		sem := newSemaphore(t, c, key, 1, time.Minute, lock.WithPollInterval(time.Hour))
		if _, err := sem.TryAcquire(ctx); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("TryAcquire while the worker holds the permit: %v, want ErrNotObtained", err)
		}
		p.Kill()
		got, err := sem.Acquire(ctx)
		if err != nil {
			t.Fatalf("Acquire after the killed worker's TTL: %v", err)
		}
		if err := got.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
