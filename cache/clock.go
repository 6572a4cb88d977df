package cache

import (
	"sync"
	"sync/atomic"
	"time"
)

// coarse is the clock of near hits: the time, updated every coarseTick by
// one goroutine while any Cache with a near cache is open. Reading the
// system clock costs about as much as the rest of a near hit; reading
// this costs an atomic load. It lags the real time by up to coarseTick
// (more while the process is starved of CPU), which is how much later an
// entry may be found stale or past its server expiry. The Lease is held
// to the real clock (see nearCache.lookup).
var coarse struct {
	now atomic.Int64 // Unix ns

	mu    sync.Mutex
	users int
	stop  chan struct{}
	done  chan struct{}
}

const coarseTick = time.Millisecond

func coarseStart() {
	coarse.mu.Lock()
	defer coarse.mu.Unlock()
	coarse.users++
	if coarse.users > 1 {
		return
	}
	coarse.now.Store(time.Now().UnixNano())
	stop, done := make(chan struct{}), make(chan struct{})
	coarse.stop, coarse.done = stop, done
	go func() {
		defer close(done)
		t := time.NewTicker(coarseTick)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				coarse.now.Store(now.UnixNano())
			}
		}
	}()
}

func coarseStop() {
	coarse.mu.Lock()
	defer coarse.mu.Unlock()
	coarse.users--
	if coarse.users == 0 {
		close(coarse.stop)
		<-coarse.done
	}
}

// coarseNow returns the coarse time; valid between coarseStart and
// coarseStop.
func coarseNow() time.Time { return time.Unix(0, coarse.now.Load()) }
