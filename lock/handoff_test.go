package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/faultproxy"
	"github.com/hotkv/stampede/internal/testkit/redistest"
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
func obtainAsync(ctx context.Context, c *lock.Client, key string, ttl time.Duration, opts ...lock.ObtainOption) <-chan obtained {
	ch := make(chan obtained, 1)
	go func() {
		l, err := c.Obtain(ctx, key, ttl, opts...)
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
var never = lock.WithRetry(lock.LinearBackoff(time.Hour))

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

// TestHandoff_noOvertaking: two waiters queued in turn and a newcomer
// arriving after the release. The first waiter gets the lock, then the
// second; the newcomer's Obtain, made as soon as the release returned
// (before or after the first waiter claimed it, either way), fails. Without
// the hand-off the release freed the key, and the newcomer took it.
func TestHandoff_noOvertaking(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		key := redistest.Key(t, "k")
		holder, rc := newClient(t, s, nil)
		first, _ := newClient(t, s, nil)
		second, _ := newClient(t, s, nil)
		newcomer, _ := newClient(t, s, nil)

		h, err := holder.Obtain(ctx, key, time.Minute, never)
		if err != nil {
			t.Fatal(err)
		}
		got1 := obtainAsync(ctx, first, key, time.Minute, never)
		waitQueued(t, ctx, rc, key, 1)
		got2 := obtainAsync(ctx, second, key, time.Minute, never)
		waitQueued(t, ctx, rc, key, 2)
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if l, err := newcomer.Obtain(ctx, key, time.Minute); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("a newcomer overtook the waiters: %v, %v", l, err)
		}
		r1 := redistest.Recv(t, ctx, got1, "the first waiter")
		if r1.err != nil {
			t.Fatal(r1.err)
		}
		select {
		case r2 := <-got2:
			t.Fatalf("the second waiter got the lock (%v) while the first held it", r2.err)
		default:
		}
		late := obtainAsync(ctx, newcomer, key, time.Minute, never) // arrives after the second waiter
		waitQueued(t, ctx, rc, key, 2)
		if err := r1.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r2 := redistest.Recv(t, ctx, got2, "the second waiter")
		if r2.err != nil {
			t.Fatal(r2.err)
		}
		select {
		case r := <-late:
			t.Fatalf("the late newcomer got the lock (%v) before the second waiter released it", r.err)
		default:
		}
		if err := r2.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r3 := redistest.Recv(t, ctx, late, "the late newcomer")
		if r3.err != nil {
			t.Fatal(r3.err)
		}
		if err := r3.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestHandoff_fencing: fencing numbers grow with every hand-off, from a
// fenced holder to fenced waiters and across an unfenced one, and the
// number a waiter learns is the one stored in the counter.
func TestHandoff_fencing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		key := redistest.Key(t, "k")
		fenceKey, _ := lock.FenceKey(key)
		c, rc := newClient(t, s, nil)
		fenced := []lock.ObtainOption{lock.WithRetry(lock.LinearBackoff(time.Hour)), lock.WithFencing()}

		l, err := c.Obtain(ctx, key, time.Minute, fenced...)
		if err != nil {
			t.Fatal(err)
		}
		last := l.Fence()
		for i, opts := range [][]lock.ObtainOption{fenced, {never}, fenced, fenced} {
			waiter, _ := newClient(t, s, nil)
			got := obtainAsync(ctx, waiter, key, time.Minute, opts...)
			waitQueued(t, ctx, rc, key, 1)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			r := redistest.Recv(t, ctx, got, "the waiter")
			if r.err != nil {
				t.Fatalf("waiter %d: %v", i, r.err)
			}
			l = r.l
			if len(opts) == 1 { // never: without fencing
				if l.Fence() != 0 {
					t.Errorf("waiter %d without fencing got fence %d", i, l.Fence())
				}
				continue
			}
			stored, _ := rc.Get(ctx, fenceKey).Int64()
			if l.Fence() <= last || l.Fence() != stored {
				t.Errorf("waiter %d: fence %d after %d (counter %d): want growing, equal to the counter", i, l.Fence(), last, stored)
			}
			last = l.Fence()
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// deaf hides the client's Subscribe: a waiter on it is never notified and
// learns of a hand-off only by its poll.
type deaf struct{ lock.RedisClient }

// TestHandoff_cancelWhileQueued: a waiter that gives up leaves the queue;
// one that was handed the lock before it gave up (it never heard: its
// client cannot subscribe, and its poll is an hour away) hands it on to
// the next waiter as it leaves, instead of leaving it held.
func TestHandoff_cancelWhileQueued(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		key := redistest.Key(t, "k")
		q, _ := lock.QueueKey(key)
		holder, rc := newClient(t, s, nil)
		h, err := holder.Obtain(ctx, key, time.Minute, never)
		if err != nil {
			t.Fatal(err)
		}

		// Cancelled while queued: the entry goes.
		quitter, _ := newClient(t, s, nil)
		qctx, qcancel := context.WithCancel(ctx)
		got := obtainAsync(qctx, quitter, key, time.Minute, never)
		waitQueued(t, ctx, rc, key, 1)
		qcancel()
		if r := redistest.Recv(t, ctx, got, "the cancelled waiter"); !errors.Is(r.err, lock.ErrNotObtained) || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled waiter: %v, want ErrNotObtained and Canceled", r.err)
		}
		if n, _ := rc.Exists(ctx, q, q+":entries").Result(); n != 0 {
			t.Fatalf("the cancelled waiter left %d queue keys", n)
		}

		// Handed the lock, then cancelled: it hands it on.
		d, err := lock.New(deaf{s.Client(t)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		dctx, dcancel := context.WithCancel(ctx)
		defer dcancel()
		dgot := obtainAsync(dctx, d, key, time.Minute, never)
		waitQueued(t, ctx, rc, key, 1)
		next, _ := newClient(t, s, nil)
		ngot := obtainAsync(ctx, next, key, time.Minute, never)
		waitQueued(t, ctx, rc, key, 2)
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if info, err := holder.Inspect(ctx, key); err != nil || info.Token == h.Token() {
			t.Fatalf("after the release the key holds %+v, %v; want the deaf waiter's claim", info, err)
		}
		select {
		case r := <-ngot:
			t.Fatalf("the second waiter got the lock (%v) while it was handed to the first", r.err)
		default:
		}
		dcancel()
		if r := redistest.Recv(t, ctx, dgot, "the deaf waiter"); !errors.Is(r.err, lock.ErrNotObtained) {
			t.Fatalf("deaf waiter: %v, want ErrNotObtained", r.err)
		}
		r := redistest.Recv(t, ctx, ngot, "the next waiter, handed the lock by the one that left")
		if r.err != nil {
			t.Fatal(r.err)
		}
		if err := r.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if n, _ := rc.Exists(ctx, key, q, q+":entries").Result(); n != 0 {
			t.Errorf("%d of the lock and its queue keys left behind", n)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// splitSub sends commands on one client and subscribes on another, so
// that a fault proxy in front of the second hits only the subscription.
type splitSub struct {
	lock.RedisClient
	sub redis.UniversalClient
}

func (s splitSub) Subscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return s.sub.Subscribe(ctx, channels...)
}

func (s splitSub) SSubscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return s.sub.SSubscribe(ctx, channels...)
}

// TestHandoff_subscriptionFaults: the waiter's subscription connection is
// black-holed, or reset, while it waits; the release's notification is
// lost, and the waiter still gets the lock by its poll (EventWakeMissed).
// After a reset the subscription comes back: the next waiter is woken.
func TestHandoff_subscriptionFaults(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, fault := range []string{"black-hole", "reset"} {
			t.Run(fault, func(t *testing.T) {
				ctx := testCtx(t)
				key := redistest.Key(t, "k")
				proxied, faults := faultRedis(t, s)
				var w wakeCounter
				waiter, err := lock.New(splitSub{s.Client(t), proxied}, &lock.Options{Observer: w.observe})
				if err != nil {
					t.Fatal(err)
				}
				holder, rc := newClient(t, s, nil)
				poll := lock.WithRetry(lock.LinearBackoff(20 * time.Millisecond))

				h, err := holder.Obtain(ctx, key, time.Minute, never)
				if err != nil {
					t.Fatal(err)
				}
				got := obtainAsync(ctx, waiter, key, time.Minute, poll)
				waitQueued(t, ctx, rc, key, 1)
				if fault == "black-hole" {
					faults.BlackHole()
				} else if faults.Reset() == 0 {
					t.Fatal("no subscription connection to reset")
				}
				if err := h.Release(ctx); err != nil {
					t.Fatal(err)
				}
				r := redistest.Recv(t, ctx, got, "the waiter, by its poll")
				if r.err != nil {
					t.Fatal(r.err)
				}
				if err := r.l.Release(ctx); err != nil {
					t.Fatal(err)
				}
				if fault == "black-hole" {
					if w.missed.Load() != 1 || w.woken.Load() != 0 {
						t.Fatalf("woken %d, missed %d; want the poll to find the hand-off", w.woken.Load(), w.missed.Load())
					}
					faults.Resume()
					return
				}
				// Reset: the waiter may have been woken by a subscription
				// already back, or have found the lock by its poll; the next
				// wait is woken by the subscription made again.
				before := w.woken.Load()
				h, err = holder.Obtain(ctx, key, time.Minute, never)
				if err != nil {
					t.Fatal(err)
				}
				got = obtainAsync(ctx, waiter, key, time.Minute, never)
				waitQueued(t, ctx, rc, key, 1)
				if err := h.Release(ctx); err != nil {
					t.Fatal(err)
				}
				r = redistest.Recv(t, ctx, got, "the waiter, woken through the new subscription")
				if r.err != nil {
					t.Fatal(r.err)
				}
				if w.woken.Load() != before+1 {
					t.Errorf("woken %d after the reset, want %d", w.woken.Load(), before+1)
				}
				_ = r.l.Release(ctx)
			})
		}
	}, redistest.Redis8, redistest.Cluster)
}

// faultRedis returns a client for s whose connections all go through fault
// proxies, and their faults (faultClient without the lock client).
func faultRedis(tb testing.TB, s *redistest.Server) (redis.UniversalClient, faultproxy.Faults) {
	tb.Helper()
	set, err := faultproxy.StartSet(s.Addrs()...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = set.Close() })
	var rc redis.UniversalClient
	if s.Kind == redistest.Cluster {
		rc = redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.Addrs(), Dialer: set.Dialer()})
	} else {
		rc = redis.NewClient(&redis.Options{Addr: set.For(s.Addrs()[0]).Addr()})
	}
	tb.Cleanup(func() { _ = rc.Close() }) // runs before the proxies close
	return rc, set.All()
}

// workerHandoff increments a plain GET/SET counter under the lock,
// LOCKTEST_G goroutines × LOCKTEST_N times, waiting with a back-off of an
// hour: every hand-off must reach its waiter by notification. It prints
// "woken W missed M".
func workerHandoff() int {
	rc := redistest.WorkerClient()
	defer rc.Close()
	var w wakeCounter
	c, _ := lock.New(rc, &lock.Options{Observer: w.observe})
	key, counter := workerEnv("KEY"), workerEnv("COUNTER")
	g, n := workerInt("G"), workerInt("N")
	ctx := context.Background()
	errs := make(chan error, g)
	var wg sync.WaitGroup
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				err := c.Do(ctx, key, 10*time.Second, func(ctx context.Context) error {
					v, err := rc.Get(ctx, counter).Int()
					if err != nil && err.Error() != "redis: nil" {
						return err
					}
					return rc.Set(ctx, counter, v+1, 0).Err()
				}, lock.WithRetry(lock.LinearBackoff(time.Hour)), lock.WithMaxWait(time.Minute))
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	fmt.Printf("woken %d missed %d\n", w.woken.Load(), w.missed.Load())
	return 0
}

// TestHandoff_processes: waiters in four processes take turns on one key
// with no lost update; each waiter polls only once an hour, so every
// hand-off reached its waiter, in another process, by notification.
func TestHandoff_processes(t *testing.T) {
	const procs, goroutines, n = 4, 3, 15
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		rc := s.Client(t)
		key, counter := redistest.Key(t, "lock"), redistest.Key(t, "counter")
		var ps []*redistest.Proc
		for range procs {
			ps = append(ps, redistest.Spawn(t, s, "handoff", "LOCKTEST_KEY="+key, "LOCKTEST_COUNTER="+counter,
				fmt.Sprintf("LOCKTEST_G=%d", goroutines), fmt.Sprintf("LOCKTEST_N=%d", n)))
		}
		var woken, missed int
		for i, p := range ps {
			out, err := p.Wait(ctx)
			if err != nil {
				t.Fatalf("worker %d: %v", i, err)
			}
			var w, m int
			if _, err := fmt.Sscanf(lastLine(out), "woken %d missed %d", &w, &m); err != nil {
				t.Fatalf("worker %d said %q: %v", i, out, err)
			}
			woken, missed = woken+w, missed+m
		}
		got, err := rc.Get(ctx, counter).Int()
		if err != nil {
			t.Fatal(err)
		}
		if want := procs * goroutines * n; got != want {
			t.Errorf("counter = %d, want %d: %d updates lost", got, want, want-got)
		}
		if woken == 0 || missed != 0 {
			t.Errorf("woken %d, missed %d: want every hand-off notified", woken, missed)
		}
		t.Logf("%d hand-offs woken by notification", woken)
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// workerWaiter waits for the lock with a back-off of LOCKTEST_WAIT and,
// once it holds it, says "held" and blocks until killed.
func workerWaiter() int {
	c := workerClient()
	wait, _ := time.ParseDuration(workerEnv("WAIT"))
	if _, err := c.Obtain(context.Background(), workerEnv("KEY"), time.Minute,
		lock.WithRetry(lock.LinearBackoff(wait)), lock.WithMaxWait(time.Minute)); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	fmt.Println("held")
	select {}
}

// TestHandoff_deadWaiter: a waiter process killed while queued first in
// line. The release hands the lock to its entry, which is still live, but
// only until the entry would have expired (a little over two back-off
// steps), not for the lock's minute; then the next waiter gets it.
func TestHandoff_deadWaiter(t *testing.T) {
	const step = 200 * time.Millisecond
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		key := redistest.Key(t, "k")
		holder, rc := newClient(t, s, nil)
		h, err := holder.Obtain(ctx, key, time.Minute, never)
		if err != nil {
			t.Fatal(err)
		}
		p := redistest.Spawn(t, s, "waiter", "LOCKTEST_KEY="+key, "LOCKTEST_WAIT="+step.String())
		waitQueued(t, ctx, rc, key, 1)
		p.Kill()
		next, _ := newClient(t, s, nil)
		got := obtainAsync(ctx, next, key, time.Minute, lock.WithRetry(lock.LinearBackoff(10*time.Millisecond)))
		waitQueued(t, ctx, rc, key, 2)
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		info, err := holder.Inspect(ctx, key)
		if err == nil && info.TTL > 2*step+100*time.Millisecond {
			t.Fatalf("the dead waiter was handed the lock for %v, more than its entry's life", info.TTL)
		}
		r := redistest.Recv(t, ctx, got, "the next waiter")
		if r.err != nil {
			t.Fatal(r.err)
		}
		if info.Token == r.l.Token() {
			t.Fatalf("the next waiter was handed the lock before the dead one's entry ran out: %+v", info)
		}
		_ = r.l.Release(ctx)
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestACL_handoff: a user with LockPerms only (no hand-off script, no
// channel) still gets a working lock, its waiter polling, with one warning;
// with HandoffPerms but not the channel, the lock is handed over and the
// waiter finds it by its poll, with warnings about SUBSCRIBE and PUBLISH;
// with all of HandoffPerms, the waiter is woken.
func TestACL_handoff(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		prefix := aclPrefix(t)
		admin := s.Client(t)
		poll := lock.WithRetry(lock.LinearBackoff(10 * time.Millisecond))
		noChannel := func(perms []string) (out []string) {
			for _, p := range perms {
				if !strings.HasPrefix(p, "&") {
					out = append(out, p)
				}
			}
			return out
		}
		for _, tc := range []struct {
			name  string
			perms []string
			opts  lock.ObtainOption
			warn  []string // in the waiter's and holder's logs
		}{
			{"lock perms", redistest.LockPerms(s.Kind, prefix+"*"), poll, []string{"waiters poll for released locks"}},
			{"no channel", append(redistest.LockPerms(s.Kind, prefix+"*"), noChannel(redistest.HandoffPerms(prefix+"*"))...), poll,
				[]string{"refused SUBSCRIBE", "refused PUBLISH"}},
			{"handoff perms", append(redistest.LockPerms(s.Kind, prefix+"*"), redistest.HandoffPerms(prefix+"*")...), never, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				ctx := testCtx(t)
				key := prefix + strings.ReplaceAll(tc.name, " ", "-")
				u := s.User(t, tc.perms...)
				var logs syncBuffer
				var w wakeCounter
				opts := &lock.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Observer: w.observe}
				holder, err := lock.New(u.Client(t), opts)
				if err != nil {
					t.Fatal(err)
				}
				waiter, err := lock.New(u.Client(t), opts)
				if err != nil {
					t.Fatal(err)
				}
				h, err := holder.Obtain(ctx, key, time.Minute, tc.opts)
				if err != nil {
					t.Fatalf("holder: %v", err)
				}
				got := obtainAsync(ctx, waiter, key, time.Minute, tc.opts)
				if tc.name == "lock perms" {
					redistest.WaitFor(t, ctx, "the waiter's warning", func() bool { return strings.Contains(logs.String(), tc.warn[0]) })
				} else {
					waitQueued(t, ctx, admin, key, 1)
				}
				if err := h.Release(ctx); err != nil {
					t.Fatalf("release: %v", err)
				}
				r := redistest.Recv(t, ctx, got, "the waiter")
				if r.err != nil {
					t.Fatalf("waiter: %v", r.err)
				}
				if err := r.l.Release(ctx); err != nil {
					t.Fatalf("waiter's release: %v", err)
				}
				for _, want := range tc.warn {
					redistest.WaitFor(t, ctx, "warning "+want, func() bool { return strings.Contains(logs.String(), want) })
				}
				switch tc.name {
				case "lock perms":
					if w.woken.Load()+w.missed.Load() != 0 {
						t.Errorf("hand-off events without hand-off: woken %d, missed %d", w.woken.Load(), w.missed.Load())
					}
				case "no channel":
					if w.missed.Load() != 1 {
						t.Errorf("missed %d, want the poll to find the hand-off", w.missed.Load())
					}
				default:
					if w.woken.Load() != 1 || strings.Contains(logs.String(), "WARN") {
						t.Errorf("woken %d, logs %q; want woken once, no warning", w.woken.Load(), logs.String())
					}
				}
				q, _ := lock.QueueKey(key)
				if n, _ := admin.Exists(ctx, key, q, q+":entries").Result(); n != 0 {
					t.Errorf("%d of the lock and its queue keys left behind", n)
				}
			})
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestHandoff_shardedPubSub: where the server has sharded pub/sub, a
// waiter subscribes with SSUBSCRIBE, on a cluster at the master that owns
// the lock's slot (PUBSUB SHARDNUMSUB there is 1), and nobody subscribes to
// the classic channel (PUBSUB NUMSUB is 0 on every node), so that a
// hand-off's message stays on that shard; it is still woken.
func TestHandoff_shardedPubSub(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		key := redistest.Key(t, "k")
		ch, _ := lock.HandoffChannel(key)
		var w wakeCounter
		holder, rc := newClient(t, s, nil)
		waiter, _ := newClient(t, s, &lock.Options{Observer: w.observe})
		h, err := holder.Obtain(ctx, key, time.Minute, never)
		if err != nil {
			t.Fatal(err)
		}
		got := obtainAsync(ctx, waiter, key, time.Minute, never)
		waitQueued(t, ctx, rc, key, 1)

		owner := s.Addrs()[0]
		if cc, ok := rc.(*redis.ClusterClient); ok {
			m, err := cc.MasterForKey(ctx, ch)
			if err != nil {
				t.Fatal(err)
			}
			owner = m.Options().Addr
		}
		for _, addr := range s.Addrs() {
			nc := redis.NewClient(&redis.Options{Addr: addr})
			shard, err := nc.PubSubShardNumSub(ctx, ch).Result()
			if err != nil {
				t.Fatal(err)
			}
			classic, err := nc.PubSubNumSub(ctx, ch).Result()
			_ = nc.Close()
			if err != nil {
				t.Fatal(err)
			}
			want := int64(0)
			if addr == owner {
				want = 1
			}
			if shard[ch] != want || classic[ch] != 0 {
				t.Errorf("node %s: %d sharded and %d classic subscribers of %s; want %d and 0", addr, shard[ch], classic[ch], ch, want)
			}
		}
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r := redistest.Recv(t, ctx, got, "the waiter")
		if r.err != nil {
			t.Fatal(r.err)
		}
		if w.woken.Load() != 1 {
			t.Errorf("woken %d, want 1", w.woken.Load())
		}
		_ = r.l.Release(ctx)
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestHandoff_expiredLock: the holder never releases and its lock
// expires. The second waiter, polling every 10ms, finds it free first, but
// hands it to the first waiter, which polls once an hour and is woken by
// that hand-off's notification; the second waits its turn. The lock is
// made to expire once both wait (a PEXPIRE, as its TTL running out would):
// a short TTL could end before they queue on a busy machine.
func TestHandoff_expiredLock(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		key := redistest.Key(t, "k")
		holder, rc := newClient(t, s, nil)
		var w wakeCounter
		first, _ := newClient(t, s, &lock.Options{Observer: w.observe})
		second, _ := newClient(t, s, nil)
		h, err := holder.Obtain(ctx, key, time.Minute, never)
		if err != nil {
			t.Fatal(err)
		}
		got1 := obtainAsync(ctx, first, key, time.Minute, never)
		waitQueued(t, ctx, rc, key, 1)
		got2 := obtainAsync(ctx, second, key, time.Minute, lock.WithRetry(lock.LinearBackoff(10*time.Millisecond)))
		waitQueued(t, ctx, rc, key, 2)
		if err := rc.PExpire(ctx, key, time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		r1 := redistest.Recv(t, ctx, got1, "the first waiter, after the holder's lock expired")
		if r1.err != nil {
			t.Fatal(r1.err)
		}
		select {
		case r := <-got2:
			t.Fatalf("the second waiter took the expired lock (%v) before the first", r.err)
		default:
		}
		if w.woken.Load() != 1 {
			t.Errorf("first waiter woken %d times, want 1", w.woken.Load())
		}
		if err := h.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("expired holder's release: %v, want ErrNotHeld", err)
		}
		if err := r1.l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		r2 := redistest.Recv(t, ctx, got2, "the second waiter")
		if r2.err != nil {
			t.Fatal(r2.err)
		}
		_ = r2.l.Release(ctx)
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestHandoff_transientReplies: a reply that is a fact about the moment
// does not switch hand-off off. An OOM raised inside the hand-off script
// (Redis >= 7 words it "OOM ... script: <sha>") fails that Obtain and
// nothing else: no warning sending the operator to the ACL, and once the
// server has memory again a waiter is handed the lock and woken. A BUSY
// answer to a Client's first look at the server (its probe of sharded
// pub/sub among it) is not kept either: the Client then announces
// hand-offs on the channel the waiters listen on. (Both used to last for
// the Client's life: the waiter then learnt of the release by its poll.)
func TestHandoff_transientReplies(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		s = redistest.Start(t, s.Kind) // made full and busy: not shared
		ctx := testCtx(t)
		key := redistest.Key(t, "k")
		var logs syncBuffer
		var w wakeCounter
		opts := &lock.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Observer: w.observe}
		holder, rc := newClient(t, s, opts)
		waiter, _ := newClient(t, s, opts)

		// BUSY while the holder's Client first looks at the server.
		stop := redistest.Busy(t, s.Addrs()[0])
		if _, err := holder.Obtain(ctx, key, time.Minute,
			lock.WithRetry(lock.LinearBackoff(time.Millisecond)), lock.WithMaxWait(time.Millisecond)); err == nil {
			t.Fatal("obtained a lock from a server answering BUSY")
		}
		stop()
		if caps, err := holder.Capabilities(ctx); err != nil || caps.Release == lock.ReleaseLua {
			t.Errorf("capabilities after one BUSY: %v, %v; want the server's own compare-and-delete", caps, err)
		}

		h, err := holder.Obtain(ctx, key, time.Minute, never)
		if err != nil {
			t.Fatalf("holder: %v", err)
		}
		got := obtainAsync(ctx, waiter, key, time.Minute, never)
		waitQueued(t, ctx, rc, key, 1)
		// OOM inside the hand-off script, as the release hands the lock on.
		if err := rc.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		if err := rc.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		oom := h.Release(ctx)
		if err := rc.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if l := logs.String(); strings.Contains(l, "refused") {
			t.Fatalf("a passing reply was logged as a refusal:\n%s", l)
		}
		if caps, err := holder.Capabilities(ctx); err != nil || caps.HandoffDenied != "" {
			t.Fatalf("capabilities %+v, %v: want hand-off not denied", caps, err)
		}
		if oom == nil {
			t.Fatal("a release under OOM reported success, and the waiter was not handed the lock")
		}
		if err := h.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		r := redistest.Recv(t, ctx, got, "the waiter to be handed the lock and woken")
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		if woken, missed := w.woken.Load(), w.missed.Load(); woken != 1 || missed != 0 {
			t.Errorf("woken %d, missed %d; want 1, 0", woken, missed)
		}
		_ = r.l.Release(ctx)
	}, redistest.Redis8, redistest.Valkey)
}

// TestHandoff_refusalRechecked: a hand-off refused by the ACL is
// remembered, said by Capabilities and a warning naming the reply, and
// tried again later: once the operator grants what it needs, waiters are
// handed the lock and woken again, without a restart.
func TestHandoff_refusalRechecked(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		prefix := aclPrefix(t)
		key := prefix + "k"
		admin := s.Client(t)
		u := s.User(t, redistest.LockPerms(s.Kind, prefix+"*")...)
		var logs syncBuffer
		var w wakeCounter
		opts := &lock.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Observer: w.observe}
		holder, err := lock.New(u.Client(t), opts)
		if err != nil {
			t.Fatal(err)
		}
		waiter, err := lock.New(u.Client(t), opts)
		if err != nil {
			t.Fatal(err)
		}
		l, err := holder.Obtain(ctx, key, time.Minute, never)
		if err != nil {
			t.Fatalf("obtain without hand-off: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		caps, err := holder.Capabilities(ctx)
		if err != nil || caps.HandoffDenied == "" || !strings.Contains(logs.String(), caps.HandoffDenied) {
			t.Fatalf("capabilities %+v, %v, logs %q: want the refusal said, with its reply", caps, err, logs.String())
		}

		if err := u.Set(append(redistest.LockPerms(s.Kind, prefix+"*"), redistest.HandoffPerms(prefix+"*")...)...); err != nil {
			t.Fatal(err)
		}
		lock.SetRecheck(holder, time.Nanosecond) // the refusal is now older than that
		lock.SetRecheck(waiter, time.Nanosecond)
		h, err := holder.Obtain(ctx, key, time.Minute, never)
		if err != nil {
			t.Fatalf("holder: %v", err)
		}
		got := obtainAsync(ctx, waiter, key, time.Minute, never)
		waitQueued(t, ctx, admin, key, 1)
		if err := h.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		r := redistest.Recv(t, ctx, got, "the waiter to be handed the lock and woken")
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		_ = r.l.Release(ctx)
		if woken := w.woken.Load(); woken != 1 {
			t.Errorf("woken %d, want 1", woken)
		}
		if caps, err := holder.Capabilities(ctx); err != nil || caps.HandoffDenied != "" {
			t.Errorf("capabilities %+v, %v: want hand-off no longer denied", caps, err)
		}
		if !strings.Contains(logs.String(), "hand-off works again") {
			t.Errorf("no line says hand-off works again:\n%s", logs.String())
		}
	}, redistest.Redis8, redistest.Valkey)
}
