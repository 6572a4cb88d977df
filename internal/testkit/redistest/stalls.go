package redistest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Stalls measures how late this process runs a goroutine that asked to
// wake up: on a busy machine (CI's, shared with other jobs) the scheduler
// can leave every goroutine of a process unscheduled for tens or hundreds
// of milliseconds, and no library can act on time while it is not
// running. A test whose assertion depends on acting within a margin (a
// lock cancelling its work before the key expires) asks Stalls whether
// such a stall overlapped the moment it checks, and excuses only those,
// so the assertion still fails for every late action the machine did not
// cause.
//
// Stalls is safe for concurrent use. Use MeasureStalls to create one.
type Stalls struct {
	tick time.Duration
	what string // what the stalls delayed, for the log: "scheduler", "server round trips"

	mu     sync.Mutex // guards stalls and worst
	stalls []stall    // in order of their end; only those longer than 2 ticks
	worst  time.Duration
}

type stall struct{ from, to time.Time }

// MeasureStalls starts measuring until tb ends: a goroutine sleeps a
// millisecond at a time and records every wake-up that came more than
// two milliseconds late.
func MeasureStalls(tb testing.TB) *Stalls {
	tb.Helper()
	s := &Stalls{tick: time.Millisecond, what: "scheduler"}
	done := make(chan struct{})
	stopped := make(chan struct{})
	tb.Cleanup(func() {
		close(done)
		<-stopped
		if w := s.Worst(); w > 0 {
			tb.Logf("%s: the longest stall seen was %v", s.what, w.Round(time.Millisecond))
		}
	})
	go func() {
		defer close(stopped)
		t := time.NewTicker(s.tick)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				now := time.Now() // the tick's own time is when it was due, not when we ran
				if late := now.Sub(last) - s.tick; late > 2*s.tick {
					s.mu.Lock()
					s.stalls = append(s.stalls, stall{last, now})
					s.worst = max(s.worst, late)
					s.mu.Unlock()
				}
				last = now
			}
		}
	}()
	return s
}

// MeasureRoundTrips starts measuring until tb ends how late the servers at
// addrs answer: one goroutine per address sends PING, one at a time, a
// millisecond apart, and records every answer that took more than two
// milliseconds, from the moment it was sent to its answer. On a busy
// machine the server's process waits for a CPU too, and a lock refreshed
// on time is lost when its answer comes after the TTL: no client can beat
// that either. A round trip's delay is the server's, the network's or this
// process's, so these stalls include those MeasureStalls sees. Within,
// Longest and Worst report them as they do this process's stalls.
func MeasureRoundTrips(tb testing.TB, addrs ...string) *Stalls {
	tb.Helper()
	s := &Stalls{what: "server round trips"}
	done := make(chan struct{})
	var wg sync.WaitGroup
	tb.Cleanup(func() {
		close(done)
		wg.Wait()
		if w := s.Worst(); w > 0 {
			tb.Logf("%s: the longest stall seen was %v", s.what, w.Round(time.Millisecond))
		}
	})
	for _, addr := range addrs {
		rc := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer rc.Close()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				select {
				case <-done:
					cancel()
				case <-ctx.Done():
				}
			}()
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
				}
				sent := time.Now()
				err := rc.Ping(ctx).Err()
				answered := time.Now()
				if err != nil && ctx.Err() != nil {
					return
				}
				// A failed PING (a server stopped by the test) is as late as
				// its answer would have been.
				if rtt := answered.Sub(sent); rtt > 2*time.Millisecond {
					s.mu.Lock()
					s.stalls = append(s.stalls, stall{sent, answered})
					s.worst = max(s.worst, rtt)
					s.mu.Unlock()
				}
			}
		}()
	}
	return s
}

// Within returns how long this process was stalled (or, for
// MeasureRoundTrips, answers were late) during [from, to]: the stalls
// that overlapped it, clipped to it, added up; time that several
// overlapping stalls cover (round trips to several servers) counts once.
func (s *Stalls) Within(from, to time.Time) time.Duration {
	s.mu.Lock()
	var in []stall
	for _, st := range s.stalls {
		a, b := st.from.Add(s.tick), st.to // the tick itself was asked for
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			in = append(in, stall{a, b})
		}
	}
	s.mu.Unlock()
	slices.SortFunc(in, func(x, y stall) int { return x.from.Compare(y.from) })
	var d time.Duration
	var end time.Time // the end of the time counted so far
	for _, st := range in {
		if st.from.Before(end) {
			st.from = end
		}
		if st.to.After(st.from) {
			d += st.to.Sub(st.from)
			end = st.to
		}
	}
	return d
}

// Longest returns the longest single stall that overlapped [from, to].
func (s *Stalls) Longest(from, to time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var d time.Duration
	for _, st := range s.stalls {
		if st.to.After(from) && st.from.Before(to) {
			d = max(d, st.to.Sub(st.from)-s.tick)
		}
	}
	return d
}

// Worst returns the longest stall seen so far.
func (s *Stalls) Worst() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.worst
}

// Progress returns a context that ends when count has not changed for
// idle (or when parent ends): the deadline of a test that does a fixed
// amount of work whose speed depends on the machine. On a busy machine
// the work takes longer but still moves; a deadline on the whole of it
// would be a guess, one on progress is not. count is read every 50ms from
// another goroutine, until the returned context ends or tb does.
func Progress(tb testing.TB, parent context.Context, idle time.Duration, what string, count func() int64) context.Context {
	tb.Helper()
	ctx, cancel := context.WithCancelCause(parent)
	tb.Cleanup(func() { cancel(nil) })
	go func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		last, since := count(), time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				if n := count(); n != last {
					last, since = n, now
				} else if now.Sub(since) >= idle {
					cancel(fmt.Errorf("redistest: no progress in %s for %v (still at %d)", what, idle, n))
					return
				}
			}
		}
	}()
	return ctx
}
