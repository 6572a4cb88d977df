package redistest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"
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
	s := &Stalls{tick: time.Millisecond}
	done := make(chan struct{})
	stopped := make(chan struct{})
	tb.Cleanup(func() {
		close(done)
		<-stopped
		if w := s.Worst(); w > 0 {
			tb.Logf("scheduler: the longest stall seen was %v", w.Round(time.Millisecond))
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

// Within returns how long this process was stalled during [from, to]:
// the stalls that overlapped it, clipped to it, added up.
func (s *Stalls) Within(from, to time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var d time.Duration
	for _, st := range s.stalls {
		a, b := st.from.Add(s.tick), st.to // the tick itself was asked for
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			d += b.Sub(a)
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
