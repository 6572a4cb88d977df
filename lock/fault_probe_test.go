package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
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

// probeFault is a client hook on the probe of sharded pub/sub, an
// SPUBLISH of an empty message (no token is empty). With busy set, the
// first probe is held back (at receives it) until the test has made the
// server answer BUSY, and once it has its reply, until the test has made
// the server answer again: the probe meets a real BUSY and nothing else
// does. With lost set, every probe fails with a timeout before it is sent,
// as a probe whose reply was lost.
type probeFault struct {
	busy, lost atomic.Bool
	at         chan *busyProbe // the held probe, while busy
	lostCalls  atomic.Int64    // probes failed while lost
}

// busyProbe is one probe held back by a probeFault.
type busyProbe struct {
	channel string        // the channel it publishes on (its slot is the server's to make busy)
	send    chan struct{} // closed by the test: the server answers BUSY, send it
	replied chan error    // the probe's reply
	resume  chan struct{} // closed by the test: the server answers again, go on
}

func faultProbes(rc redis.UniversalClient) *probeFault {
	f := &probeFault{at: make(chan *busyProbe, 1)}
	rc.AddHook(f)
	return f
}

func (f *probeFault) DialHook(next redis.DialHook) redis.DialHook { return next }

func (f *probeFault) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) != 3 || !strings.EqualFold(cmd.Name(), "spublish") || args[2] != "" {
			return next(ctx, cmd)
		}
		if f.lost.Load() {
			f.lostCalls.Add(1)
			err := errors.New("i/o timeout (the test lost the probe's reply)")
			cmd.SetErr(err)
			return err
		}
		if !f.busy.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		ch, _ := args[1].(string)
		p := &busyProbe{channel: ch, send: make(chan struct{}), replied: make(chan error, 1), resume: make(chan struct{})}
		f.at <- p
		<-p.send
		err := next(ctx, cmd)
		p.replied <- err
		<-p.resume
		return err
	}
}

func (f *probeFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// makeBusy makes the server of s that owns the held probe's channel answer
// BUSY while the probe is sent, and answer again before the prober goes
// on; it fails the test unless the probe met BUSY.
func makeBusy(tb testing.TB, ctx context.Context, s *redistest.Server, rc redis.UniversalClient, p *busyProbe) {
	tb.Helper()
	addr := s.Addrs()[0]
	if cc, ok := rc.(*redis.ClusterClient); ok {
		n, err := cc.MasterForKey(ctx, p.channel)
		if err != nil {
			tb.Fatal(err)
		}
		addr = n.Options().Addr
	}
	stop := redistest.Busy(tb, addr)
	close(p.send)
	err := redistest.Recv(tb, ctx, p.replied, "the probe's reply")
	stop()
	close(p.resume)
	if err == nil || !strings.HasPrefix(err.Error(), "BUSY") {
		tb.Fatalf("the probe got %v, want BUSY", err)
	}
}

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

// TestHandoff_waiterProbeBusy: a waiter whose probe of sharded pub/sub met
// BUSY does not subscribe in a mode guessed from it, nor queue where a
// hand-off would not reach it: it probes again soon, subscribes with
// SSUBSCRIBE once the server answers, queues, and is woken by the release
// that hands it the lock (published with SPUBLISH by a Client that knew),
// not by its back-off (30s). Nobody subscribes to the classic channel.
// (The waiter used to subscribe with SUBSCRIBE and take the lock handed to
// it only at its next poll.)
func TestHandoff_waiterProbeBusy(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		s = redistest.Start(t, s.Kind) // made busy: not shared
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		stalls := redistest.MeasureStalls(t)
		key := redistest.Key(t, "k")
		ch, _ := lock.HandoffChannel(key)
		holder, rc := newClient(t, s, nil)
		rcW := s.Client(t)
		fault := faultProbes(rcW)
		var w wakeCounter
		waiter, err := lock.New(rcW, &lock.Options{Observer: w.observe})
		if err != nil {
			t.Fatal(err)
		}
		h, err := holder.Obtain(ctx, key, time.Minute, never)
		if err != nil {
			t.Fatal(err)
		}
		fault.busy.Store(true)
		got := obtainAsync(ctx, waiter, key, time.Minute, slowPoll)
		makeBusy(t, ctx, s, rcW, redistest.Recv(t, ctx, fault.at, "the waiter's probe"))
		waitQueued(t, ctx, rc, key, 1)
		if classic, shard := handoffSubs(t, ctx, s, ch); classic != 0 || shard != 1 {
			t.Errorf("%s: %d classic and %d shard subscribers while the waiter is queued, want 0 and 1", ch, classic, shard)
		}

		from := time.Now()
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		took := time.Since(from)
		r := redistest.Recv(t, ctx, got, "the waiter")
		if r.err != nil {
			t.Fatal(r.err)
		}
		to := time.Now()
		defer r.l.Release(ctx)
		if d, bound := to.Sub(from), wakeBound(stalls, from, to, took); d > bound {
			t.Errorf("the waiter had the lock %v after the release (which took %v), want at most %v: it took it by its poll", d, took, bound)
		}
		if woken, missed := w.woken.Load(), w.missed.Load(); woken != 1 || missed != 0 {
			t.Errorf("woken %d, missed %d; want 1, 0", woken, missed)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestHandoff_releaserProbeLost: a holder whose probe of sharded pub/sub
// does not answer (every reply lost) announces its hand-off in both modes,
// so a waiter of another Client subscribed with SSUBSCRIBE (its own probe
// answered) is woken at once, not by its back-off (30s). (The release
// used to publish with PUBLISH alone, to nobody.)
func TestHandoff_releaserProbeLost(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		stalls := redistest.MeasureStalls(t)
		key := redistest.Key(t, "k")
		rcH := s.Client(t)
		faultProbes(rcH).lost.Store(true)
		holder, err := lock.New(rcH, nil)
		if err != nil {
			t.Fatal(err)
		}
		var w wakeCounter
		waiter, rc := newClient(t, s, &lock.Options{Observer: w.observe})
		h, err := holder.Obtain(ctx, key, time.Minute, never)
		if err != nil {
			t.Fatal(err)
		}
		got := obtainAsync(ctx, waiter, key, time.Minute, slowPoll)
		waitQueued(t, ctx, rc, key, 1)

		from := time.Now()
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		took := time.Since(from)
		r := redistest.Recv(t, ctx, got, "the waiter")
		if r.err != nil {
			t.Fatal(r.err)
		}
		to := time.Now()
		defer r.l.Release(ctx)
		if d, bound := to.Sub(from), wakeBound(stalls, from, to, took); d > bound {
			t.Errorf("the waiter had the lock %v after the release (which took %v), want at most %v: it took it by its poll", d, took, bound)
		}
		if woken, missed := w.woken.Load(), w.missed.Load(); woken != 1 || missed != 0 {
			t.Errorf("woken %d, missed %d; want 1, 0", woken, missed)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestHandoff_waiterProbeLost: a waiter whose probe never answers (every
// reply lost) subscribes to nothing, in neither mode, and stays out of the
// queue, where a hand-off to it would go unheard; it tries the lock at
// each re-probe step (at most keysub.ReprobeMax apart), so it takes the
// lock released by a holder who handed it to nobody within a step, not at
// its back-off (30s).
func TestHandoff_waiterProbeLost(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		stalls := redistest.MeasureStalls(t)
		key := redistest.Key(t, "k")
		ch, _ := lock.HandoffChannel(key)
		holder, rc := newClient(t, s, nil)
		rcW := s.Client(t)
		fault := faultProbes(rcW)
		fault.lost.Store(true)
		var w wakeCounter
		waiter, err := lock.New(rcW, &lock.Options{Observer: w.observe})
		if err != nil {
			t.Fatal(err)
		}
		h, err := holder.Obtain(ctx, key, time.Minute, never)
		if err != nil {
			t.Fatal(err)
		}
		got := obtainAsync(ctx, waiter, key, time.Minute, slowPoll)
		// The waiter has probed as it began, and again at a step.
		redistest.WaitFor(t, ctx, "the waiter to probe again", func() bool { return fault.lostCalls.Load() >= 2 })
		q, _ := lock.QueueKey(key)
		if n, err := rc.ZCard(ctx, q).Result(); err != nil || n != 0 {
			t.Errorf("queue length %d, %v while the waiter's probe does not answer, want 0", n, err)
		}
		if classic, shard := handoffSubs(t, ctx, s, ch); classic != 0 || shard != 0 {
			t.Errorf("%s: %d classic and %d shard subscribers while the waiter's probe does not answer, want none", ch, classic, shard)
		}

		from := time.Now()
		if err := h.Release(ctx); err != nil {
			t.Fatal(err)
		}
		took := time.Since(from)
		r := redistest.Recv(t, ctx, got, "the waiter")
		if r.err != nil {
			t.Fatal(r.err)
		}
		to := time.Now()
		defer r.l.Release(ctx)
		if d, bound := to.Sub(from), wakeBound(stalls, from, to, took); d > bound {
			t.Errorf("the waiter had the lock %v after the release (which took %v), want at most %v: it took it by its poll", d, took, bound)
		}
		if woken, missed := w.woken.Load(), w.missed.Load(); woken != 0 || missed != 0 {
			t.Errorf("woken %d, missed %d; want 0, 0 (the lock was free, not handed)", woken, missed)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}
