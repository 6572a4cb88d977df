package compare

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-co-op/gocron/v2"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/hotkv/stampede/gocronlock"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// TestCompare_gocron: three instances of a service run one gocron job on a
// schedule, with a distributed gocron.Locker so that each tick runs once.
// Their clocks disagree by 0, 100 and 200 ms, as the clocks of a fleet do,
// and the job is fast (10 ms). What each instance does at a tick is what
// gocron does: Lock(job name) at the tick by its own clock, run, Unlock.
// stampede's Locker is gocronlock; for redislock and redsync it is the
// Locker their users write (gocron's own Redis locker is redsync's mutex):
// Lock obtains, Unlock releases.
func TestCompare_gocron(t *testing.T) {
	const (
		instances = 3
		ticks     = 5
		interval  = 500 * time.Millisecond
		skew      = 100 * time.Millisecond // instance i is i*skew late
		jobRun    = 10 * time.Millisecond
	)
	s := redistest.Shared(t, redistest.Redis8)
	tests := []struct {
		name      string
		newLocker func(t *testing.T, rc redis.UniversalClient) gocron.Locker
		want      func(runs int) bool
	}{
		{"stampede", func(t *testing.T, rc redis.UniversalClient) gocron.Locker {
			c, err := lock.New(rc, nil)
			if err != nil {
				t.Fatal(err)
			}
			// MinHold: most of the interval, more than the skew.
			l, err := gocronlock.New(c, &gocronlock.Options{MinHold: 350 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			return l
		}, func(runs int) bool { return runs == ticks }},
		{"bsm/redislock", func(t *testing.T, rc redis.UniversalClient) gocron.Locker {
			return redislockLocker{redislock.New(rc)}
		}, func(runs int) bool { return runs > ticks }},
		{"redsync", func(t *testing.T, rc redis.UniversalClient) gocron.Locker {
			return redsyncLocker{redsync.New(goredis.NewPool(rc))}
		}, func(runs int) bool { return runs > ticks }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			key := redistest.Key(t, "report")
			lockers := make([]gocron.Locker, instances)
			for i := range lockers {
				lockers[i] = tt.newLocker(t, s.Client(t)) // own client: own "process"
			}
			first := time.Now().Add(interval)
			var (
				mu   sync.Mutex
				ran  = make([]int, ticks)
				errs []error
				wg   sync.WaitGroup
			)
			for i, l := range lockers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := range ticks {
						at := first.Add(time.Duration(n)*interval + time.Duration(i)*skew)
						select {
						case <-time.After(time.Until(at)): // the instance's clock reaches the tick
						case <-ctx.Done():
							return
						}
						held, err := l.Lock(ctx, key)
						if errors.Is(err, lock.ErrNotObtained) || errors.Is(err, redislock.ErrNotObtained) || isTaken(err) {
							continue // another instance has the tick
						}
						if err == nil {
							mu.Lock()
							ran[n]++
							mu.Unlock()
							time.Sleep(jobRun) // the job
							err = held.Unlock(ctx)
						}
						if err != nil {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
						}
					}
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if ctx.Err() != nil {
				t.Fatal(ctx.Err())
			}
			runs := 0
			for _, r := range ran {
				runs += r
			}
			result(t, "gocron job, 3 instances with clocks 0/100/200 ms apart, 5 ticks", tt.name, "runs", runs)
			t.Logf("runs per tick: %v", ran)
			if !tt.want(runs) {
				t.Errorf("%d runs for %d ticks (%v)", runs, ticks, ran)
			}
		})
	}
}

// isTaken says whether redsync found the mutex held.
func isTaken(err error) bool {
	var taken *redsync.ErrTaken
	return errors.As(err, &taken) || errors.Is(err, redsync.ErrFailed)
}

// redislockLocker is the gocron.Locker a redislock user writes.
type redislockLocker struct{ c *redislock.Client }

func (r redislockLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	l, err := r.c.Obtain(ctx, key, 30*time.Second, nil)
	if err != nil {
		return nil, err
	}
	return redislockLock{l}, nil
}

type redislockLock struct{ l *redislock.Lock }

func (r redislockLock) Unlock(ctx context.Context) error { return r.l.Release(ctx) }

// redsyncLocker is the gocron.Locker that gocron's Redis locker builds on
// redsync: a mutex per job, one try.
type redsyncLocker struct{ rs *redsync.Redsync }

func (r redsyncLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	m := r.rs.NewMutex(key, redsync.WithTries(1), redsync.WithExpiry(30*time.Second))
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return redsyncLock{m}, nil
}

type redsyncLock struct{ m *redsync.Mutex }

func (r redsyncLock) Unlock(ctx context.Context) error {
	ok, err := r.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: not unlocked")
	}
	return err
}
