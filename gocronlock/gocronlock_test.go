package gocronlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/hotkv/stampede/gocronlock"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

func testCtx(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// newLocker is one instance: its own Redis client, lock.Client and Locker.
func newLocker(t *testing.T, s *redistest.Server, lopts *lock.Options, opts gocronlock.Options) (*gocronlock.Locker, *lock.Client, redis.UniversalClient) {
	t.Helper()
	rdb := s.Client(t)
	c, err := lock.New(rdb, lopts)
	if err != nil {
		t.Fatal(err)
	}
	l, err := gocronlock.New(c, &opts)
	if err != nil {
		t.Fatal(err)
	}
	return l, c, rdb
}

func TestInvalid(t *testing.T) {
	s := redistest.Shared(t, redistest.Miniredis)
	c, err := lock.New(s.Client(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		c    *lock.Client
		opts *gocronlock.Options
		want string
	}{
		{"nil client", nil, &gocronlock.Options{MinHold: time.Second}, "c is nil: New needs a *lock.Client"},
		{"nil options", c, nil, "opts is nil: Options.MinHold is required (most of the job's interval)"},
		{"no MinHold", c, &gocronlock.Options{}, "Options.MinHold is not set: set it to most of the job's interval"},
		{"negative MinHold", c, &gocronlock.Options{MinHold: -time.Second}, "Options.MinHold -1s is below 1ms"},
		{"MinHold below 1ms", c, &gocronlock.Options{MinHold: time.Microsecond}, "Options.MinHold 1µs is below 1ms"},
		{"negative TTL", c, &gocronlock.Options{MinHold: time.Second, TTL: -time.Second}, "Options.TTL -1s is negative"},
		{"TTL below MinHold", c, &gocronlock.Options{MinHold: time.Second, TTL: time.Millisecond * 500},
			"Options.TTL 500ms is below Options.MinHold 1s"},
	} {
		_, err := gocronlock.New(tt.c, tt.opts)
		if want := "gocronlock: " + tt.want; !errors.Is(err, lock.ErrInvalid) || err.Error() != want {
			t.Errorf("%s: got %v, want %q matching lock.ErrInvalid", tt.name, err, want)
		}
	}
	l, err := gocronlock.New(c, &gocronlock.Options{MinHold: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	_, err = l.Lock(testCtx(t), "")
	if want := "gocronlock: Lock key (the job's name) is empty"; !errors.Is(err, lock.ErrInvalid) || err.Error() != want {
		t.Errorf("empty key: got %v, want %q matching lock.ErrInvalid", err, want)
	}
}

// TestMinHold: a job that ends at once leaves the lock held for what is
// left of MinHold, so a second instance cannot run the tick again.
func TestMinHold(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		key := redistest.Key(t, "job")
		opts := gocronlock.Options{MinHold: 10 * time.Second, Prefix: "g:"}
		a, _, rdb := newLocker(t, s, nil, opts)
		b, _, _ := newLocker(t, s, nil, opts)
		h, err := a.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Lock(ctx, key); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("second instance while the job runs: got %v, want ErrNotObtained", err)
		}
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Lock(ctx, key); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("second instance after Unlock within MinHold: got %v, want ErrNotObtained", err)
		}
		ttl, err := rdb.PTTL(ctx, "g:"+key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl <= 0 || ttl > opts.MinHold {
			t.Fatalf("TTL after Unlock %v, want in (0, %v]: the rest of MinHold", ttl, opts.MinHold)
		}
		if err := h.Unlock(ctx); err != nil {
			t.Fatalf("second Unlock: %v", err)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestUnlockNotOwner: an instance whose lock expired and was taken by
// another does not release the other's lock.
func TestUnlockNotOwner(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		key := redistest.Key(t, "job")
		a, _, rdb := newLocker(t, s, nil, gocronlock.Options{MinHold: time.Millisecond, Metadata: "a"})
		b, cb, _ := newLocker(t, s, nil, gocronlock.Options{MinHold: time.Millisecond, Metadata: "b"})
		ha, err := a.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		// a's lock is gone (as if it expired) and b holds the key.
		if err := rdb.Del(ctx, gocronlock.DefaultPrefix+key).Err(); err != nil {
			t.Fatal(err)
		}
		hb, err := b.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer hb.Unlock(ctx)
		if err := ha.Unlock(ctx); !errors.Is(err, lock.ErrLost) || !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("Unlock of a lock taken by another: got %v, want ErrLost and ErrNotHeld", err)
		}
		info, err := cb.Inspect(ctx, gocronlock.DefaultPrefix+key)
		if err != nil || info.Metadata != "b" {
			t.Fatalf("after the non-owner's Unlock the key holds %+v, %v; want b's lock", info, err)
		}
	}, redistest.Redis8, redistest.Valkey)
}

// TestOutlivesTTL: a job running longer than TTL keeps its lock: it is
// refreshed while the job runs.
func TestOutlivesTTL(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		key := redistest.Key(t, "job")
		refreshed := make(chan struct{}, 100)
		a, _, _ := newLocker(t, s, &lock.Options{Observer: func(e lock.Event) {
			if e.Kind == lock.EventRefreshed {
				select {
				case refreshed <- struct{}{}:
				default:
				}
			}
		}}, gocronlock.Options{MinHold: 100 * time.Millisecond, TTL: 150 * time.Millisecond})
		b, _, _ := newLocker(t, s, nil, gocronlock.Options{MinHold: 100 * time.Millisecond})
		start := time.Now()
		h, err := a.Lock(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		// Four refreshes every TTL/3 = 50ms: more than one TTL has passed.
		for range 4 {
			select {
			case <-refreshed:
			case <-ctx.Done():
				t.Fatal("no refresh")
			}
		}
		if time.Since(start) < 150*time.Millisecond {
			t.Fatalf("four refreshes within one TTL: %v", time.Since(start))
		}
		if _, err := b.Lock(ctx, key); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("another instance after TTL while the job runs: got %v, want ErrNotObtained", err)
		}
		if err := h.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}, redistest.Redis8, redistest.Valkey)
}

// skewed is the real clock, reading offset behind.
type skewed struct {
	clockwork.Clock
	offset time.Duration
}

func (c skewed) Now() time.Time                  { return c.Clock.Now().Add(-c.offset) }
func (c skewed) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c skewed) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// runSchedulers runs one job every interval on three gocron schedulers
// (separate clients, clocks 0, 100 and 200 ms behind) for ticks ticks and
// returns how many times each tick ran.
func runSchedulers(t *testing.T, s *redistest.Server, minHold time.Duration, ticks int) map[int]int {
	t.Helper()
	const (
		instances = 3
		interval  = time.Second
		skew      = 100 * time.Millisecond
		jobRun    = 10 * time.Millisecond // a fast job: MinHold is what keeps the others out
	)
	ctx := testCtx(t)
	key := redistest.Key(t, "job")
	first := time.Now().Truncate(interval).Add(2 * interval)
	var (
		mu       sync.Mutex
		ran      = map[int]int{}
		attempts atomic.Int64
		done     = make(chan struct{})
	)
	for i := range instances {
		locker, _, _ := newLocker(t, s, nil, gocronlock.Options{MinHold: minHold, Metadata: fmt.Sprint(i)})
		clock := skewed{clockwork.NewRealClock(), time.Duration(i) * skew}
		sched, err := gocron.NewScheduler(gocron.WithClock(clock), gocron.WithDistributedLocker(counting{locker, func() {
			if attempts.Add(1) == instances*int64(ticks) {
				close(done)
			}
		}}))
		if err != nil {
			t.Fatal(err)
		}
		_, err = sched.NewJob(gocron.DurationJob(interval), gocron.NewTask(func() {
			// Which tick: the instance's own clock reads about the tick's time.
			n := int(clock.Now().Sub(first).Round(interval) / interval)
			mu.Lock()
			ran[n]++
			mu.Unlock()
			time.Sleep(jobRun)
		}), gocron.WithName(key), gocron.WithStartAt(gocron.WithStartDateTime(first)))
		if err != nil {
			t.Fatal(err)
		}
		sched.Start()
		defer func() {
			if err := sched.Shutdown(); err != nil {
				t.Error(err)
			}
		}()
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%d lock attempts, want %d", attempts.Load(), instances*ticks)
	}
	// Shutdown (deferred) waits for running jobs; read ran after it.
	return ran
}

// counting calls attempt after every Lock.
type counting struct {
	gocron.Locker
	attempt func()
}

func (c counting) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	defer c.attempt()
	return c.Locker.Lock(ctx, key)
}

// TestSchedulers: three schedulers with skewed clocks run the job once per
// tick in total.
func TestSchedulers(t *testing.T) {
	const ticks = 5
	s := redistest.Shared(t, redistest.Redis8)
	var ran map[int]int
	t.Run("MinHold", func(t *testing.T) { ran = runSchedulers(t, s, 700*time.Millisecond, ticks) })
	total := 0
	for n := range ticks {
		total += ran[n]
		if ran[n] != 1 {
			t.Errorf("tick %d ran %d times, want 1", n, ran[n])
		}
	}
	if total != ticks {
		t.Errorf("%d runs in all (%v), want %d", total, ran, ticks)
	}
	t.Logf("runs per tick with MinHold: %v", ran)

	// Without MinHold's effect (1ms), the late instances run ticks again:
	// the test above can fail.
	t.Run("NoMinHold", func(t *testing.T) { ran = runSchedulers(t, s, time.Millisecond, ticks) })
	total = 0
	for _, n := range ran {
		total += n
	}
	if total <= ticks {
		t.Errorf("with MinHold 1ms, %d runs for %d ticks (%v): the skew did not show", total, ticks, ran)
	}
	t.Logf("runs per tick with MinHold 1ms: %v", ran)
}
