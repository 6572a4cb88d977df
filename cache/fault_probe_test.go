package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/keysub"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// The tests of a probe of sharded pub/sub that meets a transient reply
// (issue 37). The probe (keysub.Probe) asks the server with one SPUBLISH
// of an empty message; BUSY, LOADING or a timeout say nothing about what
// the server has. A waiter that subscribed in a mode guessed from such a
// reply (SUBSCRIBE, while every writer that knew published with SPUBLISH)
// heard nothing and woke only by its poll; a writer that guessed published
// where nobody listened.

// wakeBound is how long a waiter may take to learn of a write it waits
// for, from the moment it could (from: the write was let go, or the server
// answered its probe again) to the moment the waiter had it (to), when
// the writer itself took took to write and announce: a re-probe step or
// two (the waiter's probe met a transient reply before), a few of the
// writer's round trips, and the time this process was stalled meanwhile.
// It is far below the poll (30s in these tests), which is what a deaf
// waiter wakes by.
func wakeBound(stalls *redistest.Stalls, from, to time.Time, took time.Duration) time.Duration {
	return 2*keysub.ReprobeMax + 20*took + stalls.Within(from, to)
}

// rebuild is a's GetOrLoad of "k", whose load returns "v" once release
// is closed, and b's GetOrLoad of the same key, waiting for that value.
type rebuild struct {
	release         chan struct{}
	rebuilt, waited chan error // a's and b's results
}

// startRebuild starts a's GetOrLoad and returns once its load has begun.
func startRebuild(tb testing.TB, ctx context.Context, a *cache.Cache) *rebuild {
	tb.Helper()
	started := make(chan struct{})
	rb := &rebuild{release: make(chan struct{}), rebuilt: make(chan error, 1), waited: make(chan error, 1)}
	go func() {
		_, err := cache.GetOrLoad(ctx, a, "k", heldLoader(started, rb.release, "v"))
		rb.rebuilt <- err
	}()
	redistest.Recv(tb, ctx, started, "a's load to start")
	return rb
}

// startWaiter starts b's GetOrLoad, which must not load, and must get "v".
func (rb *rebuild) startWaiter(ctx context.Context, b *cache.Cache) {
	go func() {
		v, err := cache.GetOrLoad(ctx, b, "k", mustNotLoad)
		if err == nil && v != "v" {
			err = errors.New("waiter got " + v)
		}
		rb.waited <- err
	}()
}

// letGo lets a's load return and waits for a and b. It fails tb unless
// both succeeded and b had the value within wakeBound of from, the moment
// it could have had it (since says what happened then).
func (rb *rebuild) letGo(tb testing.TB, ctx context.Context, stalls *redistest.Stalls, from time.Time, since string) {
	tb.Helper()
	close(rb.release)
	released := time.Now()
	if err := redistest.Recv(tb, ctx, rb.rebuilt, "a's rebuild"); err != nil {
		tb.Fatal(err)
	}
	took := time.Since(released)
	if err := redistest.Recv(tb, ctx, rb.waited, "the waiter"); err != nil {
		tb.Fatal(err)
	}
	to := time.Now()
	if d, bound := to.Sub(from), wakeBound(stalls, from, to, took); d > bound {
		tb.Errorf("the waiter had the value %v after %s (the rebuild took %v), want at most %v: it woke by its poll", d, since, took, bound)
	}
}

// TestAnnounce_waiterProbeBusy: a waiter whose probe of sharded pub/sub
// met BUSY does not subscribe in a mode guessed from it: it probes again
// soon, subscribes with SSUBSCRIBE once the server answers, and gets the
// value of a rebuild that another Cache (another process) announced with
// SPUBLISH at once, not by its poll (30s). No classic subscription to the
// key's channel is left behind. (It used to subscribe with SUBSCRIBE and
// learn of the rebuild only by its poll.)
func TestAnnounce_waiterProbeBusy(t *testing.T) {
	redistest.ForEachProbe(t, true, func(t *testing.T, ctx context.Context, s *redistest.Server, stalls *redistest.Stalls) {
		opts := &cache.Options{Namespace: namespace(t), PollInterval: 30 * time.Second, WaitTimeout: time.Minute}
		a := newCacheOn(t, s.Client(t), opts)
		rcB := s.Client(t)
		fault := redistest.FaultProbes(rcB)
		b := newCacheOn(t, rcB, opts)

		rb := startRebuild(t, ctx, a)
		fault.HoldNext()
		rb.startWaiter(ctx, b)
		fault.MakeBusy(t, ctx, s, "b's probe")
		from := time.Now() // the server answers again
		// b waits, subscribed since before its last read: only the
		// announcement (or the poll) tells it of the value.
		redistest.WaitFor(t, ctx, "b to wait, subscribed", func() bool { return cache.CoveredWaits(b) > 0 })
		rb.letGo(t, ctx, stalls, from, "the server answered again")
		ch := valueKey(opts.Namespace, "k") + ":ann"
		if classic, shard := numsub(t, ctx, rcB, ch); classic != 0 || shard != 1 {
			t.Errorf("%s: %d classic and %d shard subscribers, want 0 and 1 (b's, lingering)", ch, classic, shard)
		}
		if st := b.Stats(); st.Loads != 0 {
			t.Errorf("b: stats %+v, want no load", st)
		}
	})
}

// TestAnnounce_writerProbeLost: a writer whose probe of sharded pub/sub
// does not answer (every reply lost) announces in both modes, so a waiter
// of another Cache subscribed with SSUBSCRIBE (its own probe answered)
// gets the value at once, not by its poll (30s). (The writer used to
// announce with PUBLISH alone, to nobody.)
func TestAnnounce_writerProbeLost(t *testing.T) {
	redistest.ForEachProbe(t, false, func(t *testing.T, ctx context.Context, s *redistest.Server, stalls *redistest.Stalls) {
		opts := &cache.Options{Namespace: namespace(t), PollInterval: 30 * time.Second, WaitTimeout: time.Minute}
		rcA := s.Client(t)
		redistest.FaultProbes(rcA).Lose()
		pubs := countReceivers(rcA)
		a := newCacheOn(t, rcA, opts)
		b := newCacheOn(t, s.Client(t), opts)

		rb := startRebuild(t, ctx, a)
		rb.startWaiter(ctx, b)
		// b waits, subscribed since before its last read: only the
		// announcement (or the poll) tells it of the value.
		redistest.WaitFor(t, ctx, "b to wait, subscribed", func() bool { return cache.CoveredWaits(b) > 0 })

		rb.letGo(t, ctx, stalls, time.Now(), "the rebuild was let go")
		if _, reached := pubs.take(); reached != 1 {
			t.Errorf("a's announcements reached %d subscribers, want 1 (b)", reached)
		}
		if st := a.Stats(); st.ServerErrors != 0 {
			t.Errorf("a: stats %+v, want no server error", st)
		}
	})
}

// TestAnnounce_waiterProbeLost: a waiter whose probe never answers
// (every reply lost) subscribes to nothing, in neither mode, and reads the
// key again at each re-probe step (at most keysub.ReprobeMax apart), so it
// gets the value of a rebuild that another Cache announced with SPUBLISH,
// which it cannot hear, within a step, not at its poll (30s).
func TestAnnounce_waiterProbeLost(t *testing.T) {
	redistest.ForEachProbe(t, false, func(t *testing.T, ctx context.Context, s *redistest.Server, stalls *redistest.Stalls) {
		opts := &cache.Options{Namespace: namespace(t), PollInterval: 30 * time.Second, WaitTimeout: time.Minute}
		rcA := s.Client(t)
		a := newCacheOn(t, rcA, opts)
		rcB := s.Client(t)
		fault := redistest.FaultProbes(rcB)
		fault.Lose()
		b := newCacheOn(t, rcB, opts)

		rb := startRebuild(t, ctx, a)
		rb.startWaiter(ctx, b)
		// b has probed before its first read, after it, and after a step.
		redistest.WaitFor(t, ctx, "b to probe again", func() bool { return fault.Lost() >= 3 })
		ch := valueKey(opts.Namespace, "k") + ":ann"
		if classic, shard := numsub(t, ctx, rcA, ch); classic != 0 || shard != 0 {
			t.Errorf("%s: %d classic and %d shard subscribers while b's probe does not answer, want none", ch, classic, shard)
		}

		rb.letGo(t, ctx, stalls, time.Now(), "the rebuild was let go")
		if st := b.Stats(); st.Loads != 0 {
			t.Errorf("b: stats %+v, want no load", st)
		}
	})
}
