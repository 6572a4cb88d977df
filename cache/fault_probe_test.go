package cache_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/keysub"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// The tests of a probe of sharded pub/sub that meets a transient reply
// (issue 37). The probe (keysub.Probe) asks the server with one SPUBLISH
// of an empty message; BUSY, LOADING or a timeout say nothing about what
// the server has. A waiter that subscribed in a mode guessed from such a
// reply (SUBSCRIBE, while every writer that knew published with SPUBLISH)
// heard nothing and woke only by its poll; a writer that guessed published
// where nobody listened.

// probeFault is a client hook on the probe of sharded pub/sub, an
// SPUBLISH of an empty message (no announcement is empty). With busy set,
// the first probe is held back (at receives its channel) until the test
// has made the server answer BUSY, and once it has its reply, until the
// test has made the server answer again: the probe meets a real BUSY and
// nothing else does. With lost set, every probe fails with a timeout
// before it is sent, as a probe whose reply was lost.
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

// TestAnnounce_waiterProbeBusy: a waiter whose probe of sharded pub/sub
// met BUSY does not subscribe in a mode guessed from it: it probes again
// soon, subscribes with SSUBSCRIBE once the server answers, and gets the
// value of a rebuild that another Cache (another process) announced with
// SPUBLISH at once, not by its poll (30s). No classic subscription to the
// key's channel is left behind. (It used to subscribe with SUBSCRIBE and
// learn of the rebuild only by its poll.)
func TestAnnounce_waiterProbeBusy(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		s = redistest.Start(t, s.Kind) // made busy: not shared
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		stalls := redistest.MeasureStalls(t)
		ns := namespace(t)
		opts := &cache.Options{Namespace: ns, PollInterval: 30 * time.Second, WaitTimeout: time.Minute}
		a := newCacheOn(t, s.Client(t), opts)
		rcB := s.Client(t)
		fault := faultProbes(rcB)
		b := newCacheOn(t, rcB, opts)

		started, release := make(chan struct{}), make(chan struct{})
		resA, resB := make(chan error, 1), make(chan error, 1)
		go func() {
			_, err := cache.GetOrLoad(ctx, a, "k", heldLoader(started, release, "v"))
			resA <- err
		}()
		redistest.Recv(t, ctx, started, "a's load to start")
		fault.busy.Store(true)
		go func() {
			v, err := cache.GetOrLoad(ctx, b, "k", mustNotLoad)
			if err == nil && v != "v" {
				err = errors.New("waiter got " + v)
			}
			resB <- err
		}()
		makeBusy(t, ctx, s, rcB, redistest.Recv(t, ctx, fault.at, "b's probe"))
		from := time.Now() // the server answers again
		// b waits, subscribed since before its last read: only the
		// announcement (or the poll) tells it of the value.
		redistest.WaitFor(t, ctx, "b to wait, subscribed", func() bool { return cache.CoveredWaits(b) > 0 })
		close(release)
		released := time.Now()
		if err := redistest.Recv(t, ctx, resA, "a's rebuild"); err != nil {
			t.Fatal(err)
		}
		took := time.Since(released)
		if err := redistest.Recv(t, ctx, resB, "the waiter"); err != nil {
			t.Fatal(err)
		}
		to := time.Now()
		if d, bound := to.Sub(from), wakeBound(stalls, from, to, took); d > bound {
			t.Errorf("the waiter had the value %v after the server answered again (the rebuild took %v), want at most %v: it woke by its poll", d, took, bound)
		}
		ch := valueKey(ns, "k") + ":ann"
		if classic, shard := numsub(t, ctx, rcB, ch); classic != 0 || shard != 1 {
			t.Errorf("%s: %d classic and %d shard subscribers, want 0 and 1 (b's, lingering)", ch, classic, shard)
		}
		if st := b.Stats(); st.Loads != 0 {
			t.Errorf("b: stats %+v, want no load", st)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestAnnounce_writerProbeLost: a writer whose probe of sharded pub/sub
// does not answer (every reply lost) announces in both modes, so a waiter
// of another Cache subscribed with SSUBSCRIBE (its own probe answered)
// gets the value at once, not by its poll (30s). (The writer used to
// announce with PUBLISH alone, to nobody.)
func TestAnnounce_writerProbeLost(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		stalls := redistest.MeasureStalls(t)
		ns := namespace(t)
		opts := &cache.Options{Namespace: ns, PollInterval: 30 * time.Second, WaitTimeout: time.Minute}
		rcA := s.Client(t)
		faultProbes(rcA).lost.Store(true)
		pubs := countReceivers(rcA)
		a := newCacheOn(t, rcA, opts)
		b := newCacheOn(t, s.Client(t), opts)

		started, release := make(chan struct{}), make(chan struct{})
		resA, resB := make(chan error, 1), make(chan error, 1)
		go func() {
			_, err := cache.GetOrLoad(ctx, a, "k", heldLoader(started, release, "v"))
			resA <- err
		}()
		redistest.Recv(t, ctx, started, "a's load to start")
		go func() {
			v, err := cache.GetOrLoad(ctx, b, "k", mustNotLoad)
			if err == nil && v != "v" {
				err = errors.New("waiter got " + v)
			}
			resB <- err
		}()
		// b waits, subscribed since before its last read: only the
		// announcement (or the poll) tells it of the value.
		redistest.WaitFor(t, ctx, "b to wait, subscribed", func() bool { return cache.CoveredWaits(b) > 0 })

		from := time.Now()
		close(release)
		if err := redistest.Recv(t, ctx, resA, "a's rebuild"); err != nil {
			t.Fatal(err)
		}
		took := time.Since(from)
		if err := redistest.Recv(t, ctx, resB, "the waiter"); err != nil {
			t.Fatal(err)
		}
		to := time.Now()
		if d, bound := to.Sub(from), wakeBound(stalls, from, to, took); d > bound {
			t.Errorf("the waiter had the value %v after the rebuild was let go (the rebuild took %v), want at most %v: it woke by its poll", d, took, bound)
		}
		if _, reached := pubs.take(); reached != 1 {
			t.Errorf("a's announcements reached %d subscribers, want 1 (b)", reached)
		}
		if st := a.Stats(); st.ServerErrors != 0 {
			t.Errorf("a: stats %+v, want no server error", st)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestAnnounce_waiterProbeLost: a waiter whose probe never answers
// (every reply lost) subscribes to nothing, in neither mode, and reads the
// key again at each re-probe step (at most keysub.ReprobeMax apart), so it
// gets the value of a rebuild that another Cache announced with SPUBLISH,
// which it cannot hear, within a step, not at its poll (30s).
func TestAnnounce_waiterProbeLost(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		stalls := redistest.MeasureStalls(t)
		ns := namespace(t)
		opts := &cache.Options{Namespace: ns, PollInterval: 30 * time.Second, WaitTimeout: time.Minute}
		rcA := s.Client(t)
		a := newCacheOn(t, rcA, opts)
		rcB := s.Client(t)
		fault := faultProbes(rcB)
		fault.lost.Store(true)
		b := newCacheOn(t, rcB, opts)

		started, release := make(chan struct{}), make(chan struct{})
		resA, resB := make(chan error, 1), make(chan error, 1)
		go func() {
			_, err := cache.GetOrLoad(ctx, a, "k", heldLoader(started, release, "v"))
			resA <- err
		}()
		redistest.Recv(t, ctx, started, "a's load to start")
		go func() {
			v, err := cache.GetOrLoad(ctx, b, "k", mustNotLoad)
			if err == nil && v != "v" {
				err = errors.New("waiter got " + v)
			}
			resB <- err
		}()
		// b has probed before its first read, after it, and after a step.
		redistest.WaitFor(t, ctx, "b to probe again", func() bool { return fault.lostCalls.Load() >= 3 })
		ch := valueKey(ns, "k") + ":ann"
		if classic, shard := numsub(t, ctx, rcA, ch); classic != 0 || shard != 0 {
			t.Errorf("%s: %d classic and %d shard subscribers while b's probe does not answer, want none", ch, classic, shard)
		}

		from := time.Now()
		close(release)
		if err := redistest.Recv(t, ctx, resA, "a's rebuild"); err != nil {
			t.Fatal(err)
		}
		took := time.Since(from)
		if err := redistest.Recv(t, ctx, resB, "the waiter"); err != nil {
			t.Fatal(err)
		}
		to := time.Now()
		if d, bound := to.Sub(from), wakeBound(stalls, from, to, took); d > bound {
			t.Errorf("the waiter had the value %v after the rebuild was let go (the rebuild took %v), want at most %v: it woke by its poll", d, took, bound)
		}
		if st := b.Stats(); st.Loads != 0 {
			t.Errorf("b: stats %+v, want no load", st)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}
