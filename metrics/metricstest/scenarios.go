package metricstest

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// Clock is a clock for cache.Options.Now that a test moves forward. The
// zero value is the wall clock; it is safe for concurrent use.
type Clock struct{ offset atomic.Int64 }

// Now returns the wall clock's time moved forward by every Advance.
func (c *Clock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// LoadString returns a loader that returns v.
func LoadString(v string) loader.Func[string] {
	return func(context.Context) (string, error) { return v, nil }
}

// NearHit loads "v" into key of c, which must have a near cache and
// hold no key yet, then reads it until the near cache answers. The
// load's write is invalidated twice, by c itself and by the server (the
// miss's read was tracked), and the server's may come after a fill and
// drop it: NearHit waits for both first, so that nothing pending drops
// the entry after it returns.
func NearHit(tb testing.TB, ctx context.Context, c *cache.Cache, key string) {
	tb.Helper()
	redistest.WaitFor(tb, ctx, "near cache active", c.NearActive)
	before := c.Stats().NearInvalidations
	if _, err := cache.GetOrLoad(ctx, c, key, LoadString("v")); err != nil {
		tb.Fatal(err)
	}
	redistest.WaitFor(tb, ctx, "the server's invalidation of the load's write", func() bool {
		return c.Stats().NearInvalidations >= before+2
	})
	redistest.WaitFor(tb, ctx, "a near hit", func() bool {
		if _, err := cache.GetOrLoad(ctx, c, key, LoadString("v")); err != nil {
			tb.Fatal(err)
		}
		return c.Stats().NearHits > 0
	})
}

// WaitForOthersLoad makes two Caches of one namespace, each on a client
// of its own from newClient, named "a" and "b" and observed by
// observer(name), watches b with watch, and has a caller of b wait for
// the load of a (another process, as far as the server can tell) until
// it is woken with a's value: one load in a, one wait in b. The Caches
// are closed when the test ends.
func WaitForOthersLoad(tb testing.TB, ctx context.Context, newClient func() redis.UniversalClient,
	observer func(name string) func(cache.Event), watch func(name string, c *cache.Cache) error) {
	tb.Helper()
	ns := redistest.Key(tb, "ns")
	newCache := func(name string) *cache.Cache {
		c, err := cache.New(newClient(), &cache.Options{Namespace: ns, Observer: observer(name)})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close() })
		return c
	}
	a, b := newCache("a"), newCache("b")
	if err := watch("b", b); err != nil {
		tb.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 2)
	go func() {
		_, err := cache.GetOrLoad(ctx, a, "k", func(ctx context.Context) (string, error) {
			close(started)
			select {
			case <-release:
				return "v", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		})
		errs <- err
	}()
	redistest.Recv(tb, ctx, started, "a's load to start")
	go func() {
		v, err := cache.GetOrLoad(ctx, b, "k", func(context.Context) (string, error) { return "", errors.New("b loaded") })
		if err == nil && v != "v" {
			err = fmt.Errorf("b got %q", v)
		}
		errs <- err
	}()
	redistest.WaitFor(tb, ctx, "b waiting", func() bool { return b.Stats().Waits == 1 })
	close(release)
	for range 2 {
		if err := redistest.Recv(tb, ctx, errs, "GetOrLoad"); err != nil {
			tb.Fatal(err)
		}
	}
}

// signalRetry is a RetryStrategy of 5 ms steps that notes when Obtain
// first asked it for a back-off (after the Obtain began) and tells when it
// asked the third time: by then the waiter has slept at least one step,
// whether it polls or queues for a hand-off. Obtain calls it on one
// goroutine.
type signalRetry struct {
	calls *int
	first *time.Time
	third chan struct{}
}

func (r signalRetry) Backoff(int) time.Duration {
	switch *r.calls++; *r.calls {
	case 1:
		*r.first = time.Now()
	case 3:
		close(r.third)
	}
	return 5 * time.Millisecond
}

// Contended is what ContendLock saw of the waiting Obtain: Asked, when it
// first asked its RetryStrategy for a back-off (after it began), and
// Released, just before the holder released, at least one back-off step
// later (and before the waiter got the lock). Its Obtain so ran at least
// Released.Sub(Asked), and ended after Released.
type Contended struct {
	Asked, Released time.Time
}

// ContendLock obtains key with locks, has a second Obtain refused and a
// third wait until the holder releases, then releases that one too: two
// obtained, one not obtained, two released. It returns when the first
// holder released.
func ContendLock(tb testing.TB, ctx context.Context, locks *lock.Client, key string) Contended {
	tb.Helper()
	l1, err := locks.Obtain(ctx, key, 10*time.Second)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := locks.Obtain(ctx, key, 10*time.Second); !errors.Is(err, lock.ErrNotObtained) {
		tb.Fatalf("second Obtain: %v, want ErrNotObtained", err)
	}
	var (
		c     Contended
		calls int
	)
	asked := make(chan struct{})
	got := make(chan *lock.Lock, 1)
	errs := make(chan error, 1)
	go func() {
		l, err := locks.Obtain(ctx, key, 10*time.Second, lock.WithRetry(signalRetry{&calls, &c.Asked, asked}))
		if err != nil {
			errs <- err
			return
		}
		got <- l
	}()
	redistest.Recv(tb, ctx, asked, "the waiter to ask for a third back-off")
	c.Released = time.Now()
	if err := l1.Release(ctx); err != nil {
		tb.Fatal(err)
	}
	var l2 *lock.Lock
	select {
	case l2 = <-got:
	case err := <-errs:
		tb.Fatal(err)
	case <-ctx.Done():
		tb.Fatal(ctx.Err())
	}
	if err := l2.Release(ctx); err != nil {
		tb.Fatal(err)
	}
	return c
}
