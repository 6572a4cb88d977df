package cache_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// failoverRun is what one run of TestNear_sentinelFailover saw.
type failoverRun struct {
	lease time.Duration

	mu     sync.Mutex
	writes []failoverWrite // by version
	acked  []time.Time     // acked[v]: when version v's write was acknowledged; zero if it was lost (see settle)
	stale  int             // reads that returned a version superseded more than the bound before they began
	oldest time.Duration
	reads  int

	readsSeen []failoverRead

	stalls *redistest.Stalls // this process's scheduler stalls, excused

	// A lagging replica promoted (see settle): last is the last version it
	// had (-1 in the other modes), old the master it replaced, back when
	// that version became the master's again (the promotion, at the
	// earliest), switched when the versions it lacked stopped being the
	// master's (the Sentinel the clients ask named it).
	last           int
	old            string
	back, switched time.Time
	lostReads      int // reads of a lost version that began after the switch

	loadMu sync.Mutex
	loads  []time.Time // when each load of the expiring key began
}

// failoverRead is a read of version v that began at began and returned
// at ended.
type failoverRead struct {
	v            int
	began, ended time.Time
}

// failoverWrite is a write the server acknowledged.
type failoverWrite struct {
	at         time.Time // when the write returned
	server     string    // the address of the server that took it
	replicated bool      // the replica had it (WAIT)
}

// wrote records the write of version v.
func (r *failoverRun) wrote(v int, w failoverWrite) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.writes) <= v {
		r.writes = append(r.writes, failoverWrite{})
	}
	r.writes[v] = w
}

// settle keeps of the writes those that the failover did not lose: the
// replicated ones and those taken by the final master (a write that the
// old master took after the replica's promotion is lost with it).
//
// With a lagging replica promoted (r.last >= 0) it keeps every write: the
// versions after r.last that the old master took while it was the master
// were what the master said then; they stop being it at the switch, when
// r.last is the master's again (see lost and check).
func (r *failoverRun) settle(master string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acked = make([]time.Time, len(r.writes))
	for v, w := range r.writes {
		if r.last >= 0 || w.replicated || w.server != "" && w.server == master {
			r.acked[v] = w.at
		}
	}
}

// lost reports whether version v was lost in the promotion of a lagging
// replica: taken by the old master after the last version the replica had.
func (r *failoverRun) lost(v int) bool {
	return r.last >= 0 && v > r.last && v < len(r.writes) && r.writes[v].server == r.old
}

// acknowledgedAfter returns how many versions after v server acknowledged.
func (r *failoverRun) acknowledgedAfter(v int, server string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for u := v + 1; u < len(r.writes); u++ {
		if r.writes[u].server == server {
			n++
		}
	}
	return n
}

// read records a read of version v that began at began and returned at
// ended.
func (r *failoverRun) read(v int, began, ended time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.readsSeen = append(r.readsSeen, failoverRead{v, began, ended})
}

// check counts the reads that returned a version superseded by an
// acknowledged write more than the bound (the Lease, plus the scheduler
// stalls of this process in between) before they began. Of the later
// versions, the one acknowledged first decides: a later acknowledgement
// is nearer the read by more than the stalls between the two.
func (r *failoverRun) check() {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := make([]time.Time, len(r.acked)+1) // first[v]: the earliest acknowledgement of a version from v on
	next := time.Time{}                        // the first acknowledgement by the final master of a version after r.last
	for v := len(r.acked) - 1; v >= 0; v-- {
		first[v] = first[v+1]
		if a := r.acked[v]; !a.IsZero() && (first[v].IsZero() || a.Before(first[v])) {
			first[v] = a
		}
		if a := r.acked[v]; r.last >= 0 && v > r.last && !r.lost(v) && !a.IsZero() && (next.IsZero() || a.Before(next)) {
			next = a
		}
	}
	for _, rd := range r.readsSeen {
		r.reads++
		if rd.v+1 >= len(first) && !r.lost(rd.v) {
			continue
		}
		var a time.Time // when version rd.v stopped being what the master said
		if rd.v+1 < len(first) {
			a = first[rd.v+1]
		}
		if r.lost(rd.v) && rd.began.After(r.switched) {
			r.lostReads++
		}
		switch {
		case r.lost(rd.v) && (a.IsZero() || r.switched.Before(a)):
			a = r.switched // the promoted replica never had it
		case rd.v == r.last && !rd.ended.Before(r.back):
			// The master's again from the promotion on: a read that
			// returned after it (one that began while the old master
			// hung, say) may return it.
			a = next
		}
		if d := rd.began.Sub(a); !a.IsZero() && d > r.lease && d > r.lease+r.stalls.Within(a, rd.began) {
			r.stale++
			r.oldest = max(r.oldest, rd.began.Sub(a))
		}
	}
}

// loadsPerExpiry returns the most loads of the expiring key that began
// within one TTL of each other (each load writes a value that lives a
// TTL, so loads are a TTL apart when there is one load per expiry),
// excusing the scheduler stalls between them: during the failover (a TTL around from
// and to) and outside it.
func (r *failoverRun) loadsPerExpiry(ttl time.Duration, from, to time.Time) (during, outside int) {
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	for i, first := range r.loads {
		n := 1
		for _, t := range r.loads[i+1:] {
			if t.Sub(first) < ttl-r.stalls.Within(first, t) {
				n++
			}
		}
		if first.After(from.Add(-ttl)) && first.Before(to.Add(ttl)) {
			during = max(during, n)
		} else {
			outside = max(outside, n)
		}
	}
	return during, outside
}

// The near cache follows the master that its failover client follows:
// after a failover, graceful (SENTINEL FAILOVER: the old master stays up,
// writable, for seconds) or of a master that hangs and is killed, and
// either of these while the replica lags (it is promoted without the last
// writes the master acknowledged, which are lost), no read returns a
// version that stopped being what the master says more than the Lease
// before it began, and the near cache answers again once it
// tracks the new master. The key that expires is loaded once per expiry
// throughout.
func TestNear_sentinelFailover(t *testing.T) {
	redistest.Long(t)
	for _, kind := range []redistest.Kind{redistest.Redis8, redistest.Valkey} {
		for _, mode := range []string{"graceful", "paused-then-killed", "lagging-replica/graceful", "lagging-replica/paused-then-killed"} {
			t.Run(string(kind)+"/"+mode, func(t *testing.T) {
				testSentinelFailover(t, kind, mode)
			})
		}
	}
}

func testSentinelFailover(t *testing.T, kind redistest.Kind, mode string) {
	s := redistest.StartSentinel(t, kind)
	ctx := testCtx(t)
	const lease, ttl = 200 * time.Millisecond, 300 * time.Millisecond
	run := &failoverRun{lease: lease, stalls: redistest.MeasureStalls(t), last: -1}
	opts := nearOpts(t)
	opts.Near.Lease = lease
	rc := s.Client(t)
	c := newCacheOn(t, rc, opts)
	redistest.WaitFor(t, ctx, "near cache active", c.NearActive)
	// The writer is another process, asking the same Sentinel. A write
	// counts once the replica has it (WAIT, on the same connection: a
	// pool of one, which Set's pipeline uses too; go-redis gives
	// pipelines a pool of their own otherwise, and a WAIT on a connection
	// that wrote nothing counts every replica at once), so that a write
	// the failover loses is not counted.
	wo := s.Options()
	wo.PoolSize, wo.PipelinePoolSize = 1, -1
	wrc := redis.NewFailoverClient(wo)
	t.Cleanup(func() { _ = wrc.Close() })
	w := newCacheOn(t, wrc, &cache.Options{Namespace: opts.Namespace, Expiry: cache.ExpiryPolicy{Fresh: time.Minute}})
	// A second process loads the expiring key too.
	other := newCacheOn(t, s.Client(t), &cache.Options{Namespace: opts.Namespace, Expiry: cache.ExpiryPolicy{Fresh: ttl}})
	expiring := newCacheOn(t, rc, &cache.Options{Namespace: opts.Namespace, Expiry: cache.ExpiryPolicy{Fresh: ttl}})
	if err := cache.Set(ctx, w, "k", 0); err != nil {
		t.Fatal(err)
	}
	run.wrote(0, failoverWrite{at: time.Now(), replicated: true})

	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { // the writer
		// The connection's ID and server before and after tell which
		// server took the write.
		for v := 1; wctx.Err() == nil; v++ {
			before, err := wrc.ClientInfo(wctx).Result()
			if err != nil {
				continue
			}
			if err := cache.Set(wctx, w, "k", v); err != nil {
				continue // the master is away: the version is never acknowledged
			}
			at := time.Now()
			n, err := wrc.Wait(wctx, 1, lease).Result()
			after, err2 := wrc.ClientInfo(wctx).Result()
			if err2 == nil && after.ID == before.ID && after.LAddr == before.LAddr {
				run.wrote(v, failoverWrite{at: at, server: before.LAddr, replicated: err == nil && n >= 1})
			}
		}
	})
	for range 3 { // readers
		wg.Go(func() {
			for wctx.Err() == nil {
				began := time.Now()
				if v, err := cache.Get[int](wctx, c, "k"); err == nil {
					run.read(v, began, time.Now()) // a failed read (the master away) returned nothing
				}
			}
		})
	}
	load := func(context.Context) (int, error) {
		run.loadMu.Lock()
		run.loads = append(run.loads, time.Now())
		run.loadMu.Unlock()
		return 1, nil
	}
	for _, lc := range []*cache.Cache{expiring, other} {
		wg.Go(func() {
			for wctx.Err() == nil {
				_, _ = cache.GetOrLoad(wctx, lc, "expiring", load)
			}
		})
	}

	// A settled start: near hits with the first master.
	before := c.Stats().NearHits
	redistest.WaitFor(t, ctx, "near hits before the failover", func() bool { return c.Stats().NearHits > before+10 })
	from, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lagging := strings.HasPrefix(mode, "lagging-replica/"); lagging {
		// The replication link breaks (see Sentinel.Lag) and the master
		// goes on acknowledging writes; then the failover promotes the
		// replica (still eligible: its link down for less than ten times
		// down-after) without them. The version it has is the master's
		// again, and the later ones are lost.
		replica, err := s.Lag(ctx)
		if err != nil {
			t.Fatal(err)
		}
		rrc := redis.NewClient(&redis.Options{Addr: replica})
		t.Cleanup(func() { _ = rrc.Close() })
		last, err := cache.Get[int](ctx, newCacheOn(t, rrc, &cache.Options{Namespace: opts.Namespace}), "k")
		if err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, ctx, "three writes the replica lacks", func() bool { return run.acknowledgedAfter(last, from) >= 3 })
		run.mu.Lock()
		run.last, run.old = last, from
		run.mu.Unlock()
	}
	named := s.WatchSwitch(ctx, from)
	// The first flush from now on: when the near cache left the old master.
	flushed := make(chan time.Time, 1)
	flushes := c.Stats().NearFlushes
	fctx, fstop := context.WithCancel(ctx)
	defer fstop()
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for c.Stats().NearFlushes == flushes {
			select {
			case <-fctx.Done():
				return
			case <-tick.C: // the count is the only sign of a flush
			}
		}
		flushed <- time.Now()
	}()
	began := time.Now()
	switch strings.TrimPrefix(mode, "lagging-replica/") {
	case "graceful":
		if _, _, err = s.Failover(ctx); err != nil {
			t.Fatal(err)
		}
	case "paused-then-killed":
		if err = s.Pause(from); err != nil {
			t.Fatal(err)
		}
		if _, err = s.WaitSwitch(ctx, from); err != nil {
			t.Fatal(err)
		}
		if err = s.Kill(from); err != nil {
			t.Fatal(err)
		}
	}
	switched := time.Now()
	sw, ok := <-named
	if !ok {
		t.Fatalf("no promotion, or the first Sentinel did not name the new master: %v", ctx.Err())
	}
	run.mu.Lock()
	run.back, run.switched = sw.Promoted, sw.Named
	run.mu.Unlock()
	to, err := s.Master(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Near hits resume once the near cache tracks the new master; the
	// run goes on past a few Leases after that, so that a read served
	// from the old master past the bound would be seen.
	hits := c.Stats().NearHits
	redistest.WaitFor(t, ctx, "near hits after the failover", func() bool { return c.Stats().NearHits > hits+10 })
	resumed := time.Since(switched)
	left := "had not flushed by then"
	select {
	case at := <-flushed:
		// Before the switch: a lapse of the Lease (the master hung) or
		// of the process (a stall).
		left = fmt.Sprintf("flushed %v after the client's Sentinel named the new master", at.Sub(run.switched).Round(time.Millisecond))
		if at.Before(run.switched) {
			left = fmt.Sprintf("flushed %v before the client's Sentinel named the new master", run.switched.Sub(at).Round(time.Millisecond))
		}
	default:
	}
	select {
	case <-time.After(4*lease + time.Second):
	case <-ctx.Done():
	}
	stop()
	wg.Wait()
	run.settle(to)
	run.check()
	during, outside := run.loadsPerExpiry(ttl, began, switched)
	run.mu.Lock()
	defer run.mu.Unlock()
	t.Logf("%s: %d reads, %d superseded past the bound (oldest %v; bound %v + stalls, the longest %v); near hits resumed %v after the switch; the near cache %s; loads per expiry %d during the failover, %d outside (%d loads)",
		mode, run.reads, run.stale, run.oldest, lease, run.stalls.Worst(), resumed.Round(time.Millisecond), left, during, outside, len(run.loads))
	if run.last >= 0 {
		lost := 0
		for v := range run.writes {
			if run.lost(v) {
				lost++
			}
		}
		t.Logf("%s: the promoted replica had version %d; %d later versions the old master acknowledged were lost; promoted at most %v before the client's Sentinel named it; %d reads of lost versions began after that",
			mode, run.last, lost, run.switched.Sub(run.back).Round(time.Millisecond), run.lostReads)
	}
	if run.stale > 0 {
		t.Errorf("%d reads returned a version superseded more than the bound before they began (oldest %v)", run.stale, run.oldest)
	}
	// During the failover one more is excused: a value written to the old
	// master after the replica's promotion (a client switches when its
	// Sentinel tells it) is lost with it, and the next read loads again.
	if outside > 1 || during > 2 {
		t.Errorf("loads of the expiring key within one TTL: %d during the failover, %d outside; want 1 per expiry (2 during: a value the old master took is lost)", during, outside)
	}
}
