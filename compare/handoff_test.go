package compare

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// handoffLocker takes the contended lock for one client and returns its
// release.
type handoffLocker func(ctx context.Context) (release func(context.Context) error, err error)

// handoffVariant makes the locker of one of n independent clients (each
// with its own connection pool, as a process would have); missed counts
// the acquisitions a waiter made by its poll after the lock had been
// handed to it (stampede's EventWakeMissed: a notification lost or late).
type handoffVariant struct {
	name string
	new  func(tb testing.TB, s *redistest.Server, key string, missed *atomic.Int64) handoffLocker
}

// Each holder keeps the lock between holdMin and holdMax, drawn at random
// so that the waiters' polls are not in step with the releases.
const holdMin, holdMax = time.Millisecond, 3 * time.Millisecond

// backoff is the retry every variant waits with between polls.
const backoffMin, backoffMax = time.Millisecond, 50 * time.Millisecond

func stampedeLocker(tb testing.TB, rc redis.UniversalClient, key string, missed *atomic.Int64, retry lock.RetryStrategy) handoffLocker {
	c, err := lock.New(rc, &lock.Options{Observer: func(e lock.Event) {
		if e.Kind == lock.EventWakeMissed {
			missed.Add(1)
		}
	}})
	if err != nil {
		tb.Fatal(err)
	}
	opts := lock.WithRetry(retry)
	return func(ctx context.Context) (func(context.Context) error, error) {
		l, err := c.Obtain(ctx, key, 10*time.Second, opts)
		if err != nil {
			return nil, err
		}
		return l.Release, nil
	}
}

var handoffVariants = []handoffVariant{
	{"stampede notify", func(tb testing.TB, s *redistest.Server, key string, missed *atomic.Int64) handoffLocker {
		return stampedeLocker(tb, s.Client(tb), key, missed, lock.ExponentialBackoff(backoffMin, backoffMax))
	}},
	// Notification with a poll once a second: a lost notification would
	// cost about a second, and shows in missed and in p99.
	{"stampede notify, poll 1s", func(tb testing.TB, s *redistest.Server, key string, missed *atomic.Int64) handoffLocker {
		return stampedeLocker(tb, s.Client(tb), key, missed, lock.LinearBackoff(time.Second))
	}},
	// Today's behaviour, poll only: a user whose ACL has what a lock needs
	// but not the hand-off (LockPerms on Redis 8: no scripts), so that
	// release is DELEX and waiters retry SET NX after each back-off step.
	{"stampede poll", func(tb testing.TB, s *redistest.Server, key string, missed *atomic.Int64) handoffLocker {
		u := pollUser(tb, s, key)
		return stampedeLocker(tb, u.Client(tb), key, missed, lock.ExponentialBackoff(backoffMin, backoffMax))
	}},
	{"bsm/redislock", func(tb testing.TB, s *redistest.Server, key string, missed *atomic.Int64) handoffLocker {
		c := redislock.New(s.Client(tb))
		return func(ctx context.Context) (func(context.Context) error, error) {
			// Its ExponentialBackoff counts calls: one per Obtain.
			l, err := c.Obtain(ctx, key, 10*time.Second, &redislock.Options{RetryStrategy: redislock.ExponentialBackoff(backoffMin, backoffMax)})
			if err != nil {
				return nil, err
			}
			return l.Release, nil
		}
	}},
}

var pollUsers sync.Map // key -> *redistest.User

func pollUser(tb testing.TB, s *redistest.Server, key string) *redistest.User {
	if u, ok := pollUsers.Load(key); ok {
		return u.(*redistest.User)
	}
	u := s.User(tb, redistest.LockPerms(s.Kind, key+"*")...)
	pollUsers.Store(key, u)
	return u
}

// handoffRun makes b.N acquisitions of one key by n clients and returns the
// hand-off latencies: from the Release of acquisition i returning to
// acquisition i+1 holding the lock. A client that released waits until
// another client has taken the lock before it contends again, so each
// acquisition is a hand-off to a client that was waiting (not its own
// re-take of a lock it has just freed), and each holds it for hold, for
// the client before it to be waiting again by the release. Latencies below zero (the next
// holder had it before the release's reply was read) count as zero.
func handoffRun(tb testing.TB, s *redistest.Server, v handoffVariant, n, total int) (lat []time.Duration, missed int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	key := redistest.Key(tb, "handoff")
	var miss atomic.Int64
	lockers := make([]handoffLocker, n)
	for i := range lockers {
		lockers[i] = v.new(tb, s, key, &miss)
	}
	base := time.Now()
	obtained := make([]time.Duration, total)
	released := make([]time.Duration, total)
	taken := make([]chan struct{}, total+1)
	for i := range taken {
		taken[i] = make(chan struct{})
	}
	var seq atomic.Int64
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for _, obtain := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				release, err := obtain(ctx)
				at := time.Since(base)
				if err != nil {
					errs <- err
					cancel()
					return
				}
				i := int(seq.Add(1) - 1)
				if i >= total {
					_ = release(ctx)
					if i == total {
						close(taken[total])
					}
					return
				}
				obtained[i] = at
				close(taken[i])
				// Hold long enough for the client that released last to
				// contend again and wait: every acquisition is then a
				// hand-off to a waiter.
				time.Sleep(holdMin + rand.N(holdMax-holdMin))
				err = release(ctx)
				released[i] = time.Since(base)
				if err != nil {
					errs <- err
					cancel()
					return
				}
				select {
				case <-taken[i+1]:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
	for i := 1; i < total; i++ {
		lat = append(lat, max(obtained[i]-released[i-1], 0))
	}
	return lat, miss.Load()
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

// BenchmarkHandoff measures, in one run on Redis 8.6, the hand-off latency
// of one contended key held in turn by 2, 4 and 8 independent clients:
// stampede's notified hand-off, stampede polling as before it (the same
// ExponentialBackoff(1ms, 50ms)), and bsm/redislock retrying with its
// ExponentialBackoff(1ms, 50ms). Reported: p50 and p99 in µs and, for
// stampede, the acquisitions whose waiter found the hand-off by its poll
// (missed: a notification lost or late). b.N is the number of
// acquisitions per run: use -benchtime=1000x.
func BenchmarkHandoff(b *testing.B) {
	s := redistest.Shared(b, redistest.Redis8)
	for _, n := range []int{2, 4, 8} {
		for _, v := range handoffVariants {
			b.Run(fmt.Sprintf("clients=%d/%s", n, v.name), func(b *testing.B) {
				total := max(b.N, 20)
				lat, missed := handoffRun(b, s, v, n, total)
				slices.Sort(lat)
				p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
				b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
				b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
				b.ReportMetric(float64(missed), "missed")
				b.ReportMetric(0, "ns/op")
				result(b, fmt.Sprintf("lock hand-off, %d clients", n), v.name,
					"p50/p99/missed", fmt.Sprintf("%v/%v/%d of %d", p50, p99, missed, len(lat)))
			})
		}
	}
}
