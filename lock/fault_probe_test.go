package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/keysub"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// The tests of a probe of sharded pub/sub that meets a transient reply
// (issue 37), for hand-offs. A Client's probe (keysub.Probe) asks the
// server with one SPUBLISH of an empty message on the hand-off channel;
// BUSY, LOADING or a timeout say nothing about what the server has. A
// waiter that subscribed in a mode guessed from such a reply (SUBSCRIBE,
// while releasers that knew published with SPUBLISH) was handed the lock
// unheard and took it only by its poll; a releaser that guessed published
// where nobody listened.

// handoffSubs returns how many classic and shard subscribers channel has
// on the servers of s, added up over the masters of a cluster.
func handoffSubs(tb testing.TB, ctx context.Context, s *redistest.Server, channel string) (classic, shard int64) {
	tb.Helper()
	for _, addr := range s.Addrs() {
		nc := redis.NewClient(&redis.Options{Addr: addr})
		sh, err := nc.PubSubShardNumSub(ctx, channel).Result()
		if err != nil {
			_ = nc.Close()
			tb.Fatal(err)
		}
		cl, err := nc.PubSubNumSub(ctx, channel).Result()
		_ = nc.Close()
		if err != nil {
			tb.Fatal(err)
		}
		classic += cl[channel]
		shard += sh[channel]
	}
	return classic, shard
}

// slowPoll is a waiter's back-off no hand-off in these tests waits for:
// a waiter that takes the lock within a small part of it was woken.
var slowPoll = lock.WithRetry(lock.LinearBackoff(30 * time.Second))

// wakeBound is how long a waiter may take to get the lock, from the
// release that hands it over (from) to the moment the waiter had it (to),
// when the release itself took took: a re-probe step or two, a few of the
// release's round trips, and the time this process was stalled meanwhile.
// It is far below the waiter's back-off (30s), which is what a deaf waiter
// wakes by.
func wakeBound(stalls *redistest.Stalls, from, to time.Time, took time.Duration) time.Duration {
	return 2*keysub.ReprobeMax + 20*took + stalls.Within(from, to)
}

// handOver releases h, which the waiter's Obtain (got) waits for, and
// returns the lock the waiter took; the caller releases it. It fails tb
// unless the waiter had the lock within wakeBound of the release, and its
// Client (w) reported woken wake-ups (0: the lock was free, not handed)
// and no missed one.
func handOver(tb testing.TB, ctx context.Context, stalls *redistest.Stalls, h *lock.Lock, got <-chan obtained, w *wakeCounter, woken int64) *lock.Lock {
	tb.Helper()
	from := time.Now()
	if err := h.Release(ctx); err != nil {
		tb.Fatal(err)
	}
	took := time.Since(from)
	r := redistest.Recv(tb, ctx, got, "the waiter")
	if r.err != nil {
		tb.Fatal(r.err)
	}
	to := time.Now()
	if d, bound := to.Sub(from), wakeBound(stalls, from, to, took); d > bound {
		tb.Errorf("the waiter had the lock %v after the release (which took %v), want at most %v: it took it by its poll", d, took, bound)
	}
	if n, missed := w.woken.Load(), w.missed.Load(); n != woken || missed != 0 {
		tb.Errorf("woken %d, missed %d; want %d, 0", n, missed, woken)
	}
	return r.l
}

// holdWithWaiter makes a holder's Client on rcH and a waiter's on rcW,
// whose events the returned wakeCounter counts, and obtains key with the
// holder's. Either client may carry a ProbeFault.
func holdWithWaiter(tb testing.TB, ctx context.Context, rcH, rcW redis.UniversalClient, key string) (h *lock.Lock, waiter *lock.Client, w *wakeCounter) {
	tb.Helper()
	holder, err := lock.New(rcH, nil)
	if err != nil {
		tb.Fatal(err)
	}
	w = new(wakeCounter)
	waiter, err = lock.New(rcW, &lock.Options{Observer: w.observe})
	if err != nil {
		tb.Fatal(err)
	}
	h, err = holder.Obtain(ctx, key, time.Minute, never)
	if err != nil {
		tb.Fatal(err)
	}
	return h, waiter, w
}

// TestHandoff_waiterProbeBusy: a waiter whose probe of sharded pub/sub met
// BUSY does not subscribe in a mode guessed from it, nor queue where a
// hand-off would not reach it: it probes again soon, subscribes with
// SSUBSCRIBE once the server answers, queues, and is woken by the release
// that hands it the lock (published with SPUBLISH by a Client that knew),
// not by its back-off (30s). Nobody subscribes to the classic channel.
// (The waiter used to subscribe with SUBSCRIBE and take the lock handed to
// it only at its next poll.)
func TestHandoff_waiterProbeBusy(t *testing.T) {
	redistest.ForEachProbe(t, true, func(t *testing.T, ctx context.Context, s *redistest.Server, stalls *redistest.Stalls) {
		key := redistest.Key(t, "k")
		ch, _ := lock.HandoffChannel(key)
		rc, rcW := s.Client(t), s.Client(t)
		fault := redistest.FaultProbes(rcW)
		h, waiter, w := holdWithWaiter(t, ctx, rc, rcW, key)
		fault.HoldNext()
		got := obtainAsync(ctx, waiter, key, time.Minute, slowPoll)
		fault.MakeBusy(t, ctx, s, "the waiter's probe")
		waitQueued(t, ctx, rc, key, 1)
		if classic, shard := handoffSubs(t, ctx, s, ch); classic != 0 || shard != 1 {
			t.Errorf("%s: %d classic and %d shard subscribers while the waiter is queued, want 0 and 1", ch, classic, shard)
		}

		handOver(t, ctx, stalls, h, got, w, 1).Release(ctx)
	})
}

// TestHandoff_releaserProbeLost: a holder whose probe of sharded pub/sub
// does not answer (every reply lost) announces its hand-off in both modes,
// so a waiter of another Client subscribed with SSUBSCRIBE (its own probe
// answered) is woken at once, not by its back-off (30s). (The release
// used to publish with PUBLISH alone, to nobody.)
func TestHandoff_releaserProbeLost(t *testing.T) {
	redistest.ForEachProbe(t, false, func(t *testing.T, ctx context.Context, s *redistest.Server, stalls *redistest.Stalls) {
		key := redistest.Key(t, "k")
		rcH, rc := s.Client(t), s.Client(t)
		redistest.FaultProbes(rcH).Lose()
		h, waiter, w := holdWithWaiter(t, ctx, rcH, rc, key)
		got := obtainAsync(ctx, waiter, key, time.Minute, slowPoll)
		waitQueued(t, ctx, rc, key, 1)

		handOver(t, ctx, stalls, h, got, w, 1).Release(ctx)
	})
}

// TestHandoff_waiterProbeLost: a waiter whose probe never answers (every
// reply lost) subscribes to nothing, in neither mode, and stays out of the
// queue, where a hand-off to it would go unheard; it tries the lock at
// each re-probe step (at most keysub.ReprobeMax apart), so it takes the
// lock released by a holder who handed it to nobody within a step, not at
// its back-off (30s).
func TestHandoff_waiterProbeLost(t *testing.T) {
	redistest.ForEachProbe(t, false, func(t *testing.T, ctx context.Context, s *redistest.Server, stalls *redistest.Stalls) {
		key := redistest.Key(t, "k")
		ch, _ := lock.HandoffChannel(key)
		rc, rcW := s.Client(t), s.Client(t)
		fault := redistest.FaultProbes(rcW)
		fault.Lose()
		h, waiter, w := holdWithWaiter(t, ctx, rc, rcW, key)
		got := obtainAsync(ctx, waiter, key, time.Minute, slowPoll)
		// The waiter has probed as it began, and again at a step.
		redistest.WaitFor(t, ctx, "the waiter to probe again", func() bool { return fault.Lost() >= 2 })
		q, _ := lock.QueueKey(key)
		if n, err := rc.ZCard(ctx, q).Result(); err != nil || n != 0 {
			t.Errorf("queue length %d, %v while the waiter's probe does not answer, want 0", n, err)
		}
		if classic, shard := handoffSubs(t, ctx, s, ch); classic != 0 || shard != 0 {
			t.Errorf("%s: %d classic and %d shard subscribers while the waiter's probe does not answer, want none", ch, classic, shard)
		}

		handOver(t, ctx, stalls, h, got, w, 0).Release(ctx) // the lock was free, not handed
	})
}
