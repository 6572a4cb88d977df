package main

import (
	"context"
	"sync"
	"time"
)

// stalls records how late this worker process's goroutines ran: a
// goroutine sleeps a millisecond at a time and notes each wake-up that came
// more than stallFloor late, with when it came. The near cache's clock is
// a goroutine of the same process ticking every millisecond; a process
// starved of CPU for longer than half a Lease can serve an entry past its
// Lease by the excess (docs/near-cache.md, "The coherence bound"), and the
// coherence check excuses exactly that much, no more (see checkRead).
type stalls struct {
	mu   sync.Mutex
	ring [4096]stall // the most recent, oldest overwritten first
	n    int         // stalls recorded so far
}

type stall struct {
	at   int64         // when the late wake-up came, Unix ns
	late time.Duration // how late it came
}

// stallFloor is the lateness below which a wake-up is not recorded.
const stallFloor = 5 * time.Millisecond

// run measures until ctx ends.
func (s *stalls) run(ctx context.Context) {
	const tick = time.Millisecond
	prev := time.Now()
	for ctx.Err() == nil {
		time.Sleep(tick)
		now := time.Now()
		if late := now.Sub(prev) - tick; late > stallFloor {
			s.mu.Lock()
			s.ring[s.n%len(s.ring)] = stall{at: now.UnixNano(), late: late}
			s.n++
			s.mu.Unlock()
		}
		prev = now
	}
}

// worst returns the largest lateness of a wake-up that came between from
// and to (Unix ns): the process was stalled that long within the interval
// or just before it.
func (s *stalls) worst(from, to int64) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var w time.Duration
	for i := max(0, s.n-len(s.ring)); i < s.n; i++ {
		if x := s.ring[i%len(s.ring)]; x.at >= from && x.at <= to {
			w = max(w, x.late)
		}
	}
	return w
}
