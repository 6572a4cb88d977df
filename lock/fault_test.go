package lock_test

// The lock under network faults. Every holder reaches a real server through
// its own faultproxy (on a cluster, its own proxy per node), so latency,
// spikes, resets and black holes hit holders differently. The protected
// resource is a fenced store in this process; every critical section is
// recorded as one operation and the history is checked exactly with
// porcupine, and the holders' intervals are checked for overlap.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/hotkv/stampede/internal/testkit/faultproxy"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// faultTTL is the lock TTL in these tests. The keep-alive cancels work
// min(ttl/10, 100ms) before the lock could expire, so 1s leaves 100ms for
// the check that the key was still the holder's when its work was told.
const faultTTL = time.Second

// shortTimeouts are client options for a holder behind a fault proxy: a
// stalled call fails fast instead of hanging.
func shortTimeouts() *redis.Options {
	return &redis.Options{
		DialTimeout:  200 * time.Millisecond,
		ReadTimeout:  150 * time.Millisecond,
		WriteTimeout: 150 * time.Millisecond,
		PoolTimeout:  300 * time.Millisecond,
		PoolSize:     4,
		MaxRetries:   1,
	}
}

// faultClient returns a lock client whose connections all go through
// fault proxies in front of s, and the faults of those proxies. On a
// cluster there is one proxy per node, reached through
// ClusterOptions.Dialer (the client dials the addresses CLUSTER SLOTS
// names, so a proxy given as its address would be bypassed), and a fault
// hits every node: the holder's whole path to the server. Client and
// proxies are closed in tb.Cleanup.
func faultClient(tb testing.TB, s *redistest.Server, opts *redis.Options) (*lock.Client, faultproxy.Faults) {
	tb.Helper()
	rc, set := proxiedClient(tb, s, opts)
	lc, err := lock.New(rc, nil)
	if err != nil {
		tb.Fatal(err)
	}
	// Probe the server before any fault, as a long-running process would
	// have done long ago; on a cluster this also loads the slot map.
	ctx, cancel := context.WithTimeout(tb.Context(), 5*time.Second)
	defer cancel()
	if _, err := lc.Capabilities(ctx); err != nil {
		tb.Fatal(err)
	}
	if st := set.All().Stats(); st.Accepted == 0 {
		tb.Fatalf("the client reached the server without its proxies: %+v", st)
	}
	return lc, set.All()
}

// proxiedClient returns a go-redis client with opts (its timeouts, pool,
// retries and identity; the address is the proxy's) whose connections all
// go through fault proxies in front of s, as faultClient says, and the
// proxies. Both are closed in tb.Cleanup, the client first.
func proxiedClient(tb testing.TB, s *redistest.Server, opts *redis.Options) (redis.UniversalClient, *faultproxy.Set) {
	tb.Helper()
	set, err := faultproxy.StartSet(s.Addrs()...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = set.Close() })
	var rc redis.UniversalClient
	if s.Kind == redistest.Cluster {
		rc = redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.Addrs(), Dialer: set.Dialer(),
			DialTimeout: opts.DialTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout,
			PoolTimeout: opts.PoolTimeout, PoolSize: opts.PoolSize, MaxRetries: opts.MaxRetries,
			DisableIdentity: opts.DisableIdentity})
	} else {
		opts.Addr = set.For(s.Addrs()[0]).Addr()
		rc = redis.NewClient(opts)
	}
	tb.Cleanup(func() { _ = rc.Close() }) // runs before the proxies close
	return rc, set
}

// fenceMode says how much fencing the store does.
type fenceMode int

const (
	// fenceReadsAndWrites rejects a read or write whose fence is below the
	// largest seen, and a read registers its fence. Registering on read is
	// what makes read-modify-write safe: a newer holder's read turns away
	// an older holder's write that was paused after its own read.
	fenceReadsAndWrites fenceMode = iota
	// fenceWritesOnly (negative control) checks writes only: a late write
	// can still land between a newer holder's read and its write.
	fenceWritesOnly
	// fenceOff (negative control) accepts everything.
	fenceOff
)

// fencedStore is the protected resource: one counter that holders
// increment by reading it and writing it back. It is safe for concurrent
// use.
type fencedStore struct {
	mode fenceMode

	mu       sync.Mutex // guards everything below
	n        int
	maxFence int64
	accepted int   // writes
	rejected int   // writes
	refused  int   // reads
	seen     int64 // the largest fence that reached the store, in every mode
	waiters  []fenceWaiter
}

type fenceWaiter struct {
	fence int64
	ch    chan struct{}
}

// passed returns a channel that is closed once a read or write with a
// fence above fence has reached the store.
func (s *fencedStore) passed(fence int64) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := make(chan struct{})
	if s.seen > fence {
		close(ch)
	} else {
		s.waiters = append(s.waiters, fenceWaiter{fence, ch})
	}
	return ch
}

// see notes that fence reached the store; s.mu is held.
func (s *fencedStore) see(fence int64) {
	s.seen = max(s.seen, fence)
	s.waiters = slices.DeleteFunc(s.waiters, func(w fenceWaiter) bool {
		if w.fence < fence {
			close(w.ch)
			return true
		}
		return false
	})
}

// read returns the counter, or ok false if fence is below the largest seen.
func (s *fencedStore) read(fence int64) (n int, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.see(fence)
	if s.mode == fenceReadsAndWrites {
		if fence < s.maxFence {
			s.refused++
			return 0, false
		}
		s.maxFence = fence
	}
	return s.n, true
}

// write sets the counter to n unless fence is below the largest seen.
func (s *fencedStore) write(fence int64, n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.see(fence)
	if s.mode != fenceOff {
		if fence < s.maxFence {
			s.rejected++
			return false
		}
		s.maxFence = fence
	}
	s.n = n
	s.accepted++
	return true
}

func (s *fencedStore) counts() (n, accepted, rejected, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n, s.accepted, s.rejected, s.refused
}

// The history model. One operation is one critical section: read the
// counter with the holder's fence, work, write it back plus one. The
// specification is that each critical section is one atomic step taken at
// its read:
//
//   - a read turned away (fence below the largest seen) changes nothing;
//   - a read let through saw the current count, had a fence at least the
//     largest seen, and registers its fence; the write, if it was accepted,
//     adds one in the same step. A write that was rejected, or never made
//     because the work was cancelled, leaves the count alone, but the
//     registered fence stays: that partial effect is part of the state.
//
// The store behaves like this exactly when no accepted write follows a
// read by a newer fence: then nobody can have read between an accepted
// write's read and the write itself, so taking the whole section at its
// read instant gives every later read the value it saw. A lost update (two
// accepted sections that read the same count) has no such order.
//
// An audit operation after the run reads the count without a fence.

type csInput struct {
	fence int64
	audit bool
}

type csOutput struct {
	readOK bool // the read was let through
	read   int  // the count it returned
	wrote  bool // the write was accepted
}

type storeState struct {
	n        int
	maxFence int64
}

var storeModel = porcupine.Model{
	Init: func() any { return storeState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(storeState), input.(csInput), output.(csOutput)
		switch {
		case in.audit:
			return out.read == st.n, st
		case !out.readOK:
			return in.fence < st.maxFence, st
		case out.read != st.n || in.fence < st.maxFence:
			return false, st
		case out.wrote:
			return true, storeState{st.n + 1, in.fence}
		default:
			return true, storeState{st.n, in.fence}
		}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(csInput), output.(csOutput)
		switch {
		case in.audit:
			return fmt.Sprintf("audit -> %d", out.read)
		case !out.readOK:
			return fmt.Sprintf("fence %d: read refused", in.fence)
		case out.wrote:
			return fmt.Sprintf("fence %d: read %d, wrote %d", in.fence, out.read, out.read+1)
		}
		return fmt.Sprintf("fence %d: read %d, no write", in.fence, out.read)
	},
	DescribeState: func(state any) string {
		st := state.(storeState)
		return fmt.Sprintf("n=%d maxFence=%d", st.n, st.maxFence)
	},
}

// history records what the holders did, with times from one monotonic
// clock. It is safe for concurrent use.
type history struct {
	start  time.Time
	stalls *redistest.Stalls // this process's scheduler stalls, which excuse a late notice

	mu     sync.Mutex // guards everything below
	ops    []porcupine.Operation
	spans  []span
	losses []loss

	callbacks sync.WaitGroup // context.AfterFunc callbacks still running
}

// span is when a holder believed it held the lock: from the start of its
// work (after Obtain returned) to when the work was cancelled or returned.
type span struct {
	holder     int
	fence      int64
	begin, end int64
}

// loss is one work context cancelled with ErrLost, and what the key held
// at that moment, read over a fault-free connection.
type loss struct {
	holder int
	fence  int64
	held   bool          // the key still held this holder's token
	left   time.Duration // its remaining TTL
	err    error
	// stalled is how long this process was not scheduled from a margin
	// before the work was cancelled until Inspect answered.
	stalled time.Duration
}

func newHistory(tb testing.TB) *history {
	return &history{start: time.Now(), stalls: redistest.MeasureStalls(tb)}
}

func (h *history) now() int64 { return int64(time.Since(h.start)) }

// op records one critical section; late says it wrote after a pause.
func (h *history) op(holder int, fence int64, call int64, out csOutput, late bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, porcupine.Operation{
		ClientId: holder, Input: csInput{fence: fence}, Call: call, Output: out, Return: h.now(), Metadata: late})
}

// lateWrites counts the writes made after a pause, and how many of them
// the store rejected.
func (h *history) lateWrites() (late, rejected int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, op := range h.ops {
		if op.Metadata == true {
			late++
			if !op.Output.(csOutput).wrote {
				rejected++
			}
		}
	}
	return late, rejected
}

// rig is one run: a key, a store, a history and a fault-free client.
type rig struct {
	key    string
	ttl    time.Duration
	store  *fencedStore
	hist   *history
	direct *lock.Client
	ctx    context.Context // bounds everything, also pauses
}

// plan is one critical section's script.
type plan struct {
	work time.Duration
	// pause, if set, runs between the check that the work's context is
	// alive and the write, as a stop-the-world pause would: the write
	// that follows may be late. The holder's span still ends when its
	// work's context was cancelled, since it believed it held the lock
	// only until then.
	pause func(fence int64)
	// afterRead, if set, runs right after a successful read.
	afterRead func()
}

// section returns the work function for Do: one critical section by
// holder, recorded in r.hist.
func (r *rig) section(holder int, p plan) func(context.Context) error {
	return func(work context.Context) error {
		begin := r.hist.now()
		l := lock.FromContext(work)
		if l == nil {
			return errors.New("no lock in the work's context")
		}
		// A loss is inspected before the work returns, so that Do has not
		// released the key yet. A loss after the work returned (the keep-
		// alive failed while Do was stopping it) is not a loss of work.
		var (
			mu           sync.Mutex
			cancelled    int64 // when the work's context ended; 0 until then
			returned     bool
			lostByReturn bool                  // the work returned after its context ended with ErrLost
			inspected    = make(chan struct{}) // closed when the callback is done
		)
		r.hist.callbacks.Add(1)
		context.AfterFunc(work, func() {
			defer r.hist.callbacks.Done()
			defer close(inspected)
			mu.Lock()
			cancelled = r.hist.now()
			cancelledAt := time.Now()
			skip := !errors.Is(context.Cause(work), lock.ErrLost) || returned && !lostByReturn
			mu.Unlock()
			if skip {
				return
			}
			ctx, cancel := context.WithTimeout(r.ctx, 2*time.Second)
			info, err := r.direct.Inspect(ctx, r.key)
			cancel()
			stalled := r.hist.stalls.Within(cancelledAt.Add(-lossMargin(r.ttl)), time.Now())
			r.hist.mu.Lock()
			r.hist.losses = append(r.hist.losses, loss{holder: holder, fence: l.Fence(),
				held: err == nil && info.Token == l.Token(), left: info.TTL, err: err, stalled: stalled})
			r.hist.mu.Unlock()
		})
		defer func() {
			end := r.hist.now()
			mu.Lock()
			returned = true
			lostByReturn = errors.Is(context.Cause(work), lock.ErrLost)
			if cancelled != 0 {
				end = min(end, cancelled)
			}
			mu.Unlock()
			if lostByReturn {
				<-inspected
			}
			r.hist.mu.Lock()
			r.hist.spans = append(r.hist.spans, span{holder: holder, fence: l.Fence(), begin: begin, end: end})
			r.hist.mu.Unlock()
		}()

		if work.Err() != nil {
			return context.Cause(work) // the store was never touched
		}
		call := r.hist.now()
		v, ok := r.store.read(l.Fence())
		if !ok {
			r.hist.op(holder, l.Fence(), call, csOutput{}, false)
			return nil
		}
		if p.afterRead != nil {
			p.afterRead()
		}
		timer := time.NewTimer(p.work)
		defer timer.Stop()
		select {
		case <-work.Done():
		case <-timer.C:
		}
		if work.Err() != nil {
			r.hist.op(holder, l.Fence(), call, csOutput{readOK: true, read: v}, false)
			return context.Cause(work)
		}
		if p.pause != nil {
			p.pause(l.Fence())
		}
		wrote := r.store.write(l.Fence(), v+1)
		r.hist.op(holder, l.Fence(), call, csOutput{readOK: true, read: v, wrote: wrote}, p.pause != nil)
		return nil
	}
}

// checkHistory checks the recorded operations, plus a final audit of the
// store, against storeModel and returns porcupine's verdict. On anything
// but the wanted verdict it writes a visualisation to the test's artifact
// directory.
func checkHistory(tb testing.TB, r *rig, want porcupine.CheckResult) porcupine.CheckResult {
	tb.Helper()
	r.hist.callbacks.Wait()
	n, _, _, _ := r.store.counts()
	call := r.hist.now()
	r.hist.mu.Lock()
	auditor := 0 // a client id of its own, next to the holders'
	for _, op := range r.hist.ops {
		auditor = max(auditor, op.ClientId+1)
	}
	ops := append(slices.Clone(r.hist.ops), porcupine.Operation{
		ClientId: auditor, Input: csInput{audit: true}, Call: call, Output: csOutput{read: n}, Return: r.hist.now()})
	r.hist.mu.Unlock()
	res, info := porcupine.CheckOperationsVerbose(storeModel, ops, 10*time.Second)
	if res != want {
		path := filepath.Join(tb.ArtifactDir(), "history.html")
		if err := porcupine.VisualizePath(storeModel, info, path); err == nil {
			tb.Logf("history of %d operations visualised in %s", len(ops), path)
		}
	}
	return res
}

// checkSpans fails tb if two spans overlap, closed intervals both. A
// paused holder's span ends when its work was told, not at its late write:
// from then on only the store's fencing protects it.
func checkSpans(tb testing.TB, spans []span) {
	tb.Helper()
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.begin, b.begin) })
	for i := 1; i < len(spans); i++ {
		last := spans[0] // the span that ends last among spans[:i]
		for _, s := range spans[1:i] {
			if s.end > last.end {
				last = s
			}
		}
		if cur := spans[i]; cur.begin <= last.end {
			tb.Errorf("holder %d (fence %d) began at %v while holder %d (fence %d) held the lock until %v",
				cur.holder, cur.fence, time.Duration(cur.begin), last.holder, last.fence, time.Duration(last.end))
		}
	}
}

// lossMargin is how long before a lock of ttl expires Do cancels its work
// when the keep-alive cannot renew it (lock/do.go).
func lossMargin(ttl time.Duration) time.Duration { return min(ttl/10, 100*time.Millisecond) }

// checkLosses fails tb unless every holder told it lost the lock was told
// while the key still held its token. A late notice (the key held another
// token, or had expired: Inspect's ErrNotHeld) is excused only when this
// process was stalled for half the margin or more between the moment Do
// meant to act and Inspect's answer (a busy machine that did not run the
// process cannot be beaten by any client); it is logged, and a late
// notice without such a stall fails, as does an Inspect that failed.
func checkLosses(tb testing.TB, losses []loss, ttl time.Duration) (minLeft time.Duration) {
	tb.Helper()
	minLeft = time.Hour
	for _, l := range losses {
		if !l.held || l.err != nil {
			late := l.err == nil || errors.Is(l.err, lock.ErrNotHeld)
			if late && l.stalled >= lossMargin(ttl)/2 {
				tb.Logf("holder %d (fence %d) was told late, excused: the process was stalled %v of the %v margin",
					l.holder, l.fence, l.stalled.Round(time.Millisecond), lossMargin(ttl))
				continue
			}
			tb.Errorf("holder %d (fence %d) was told it lost the lock only after it had: Inspect = %v, token held %t, process stalled %v",
				l.holder, l.fence, l.err, l.held, l.stalled.Round(time.Millisecond))
			continue
		}
		minLeft = min(minLeft, l.left)
	}
	return minLeft
}

// TestDo_faults_keepAliveLossBeforeExpiry black-holes a holder's only
// path to the server (on a cluster, every node's) while it works: its work
// context must be cancelled with ErrLost while the key still holds its
// token, whatever the client's own timeouts.
func TestDo_faults_keepAliveLossBeforeExpiry(t *testing.T) {
	tests := []struct {
		name string
		opts func() *redis.Options
	}{
		{"short client timeouts", shortTimeouts},
		// go-redis ignores context deadlines by default and waits for its
		// own ReadTimeout (3s), longer than the lock's TTL.
		{"go-redis default timeouts", func() *redis.Options { return &redis.Options{} }},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
				defer cancel()
				lc, p := faultClient(t, s, tt.opts())
				direct, _ := newClient(t, s, nil)
				r := &rig{key: redistest.Key(t, "lock"), ttl: faultTTL, store: &fencedStore{},
					hist: newHistory(t), direct: direct, ctx: ctx}

				working := make(chan struct{})
				var holed atomic.Int64
				done := make(chan error, 1)
				section := r.section(0, plan{work: time.Minute, afterRead: func() {
					p.BlackHole()
					holed.Store(r.hist.now())
					close(working)
				}})
				go func() {
					done <- lc.Do(ctx, r.key, r.ttl, func(work context.Context) error {
						err := section(work)
						// The work has seen its context end: let the
						// held-back bytes through so that Do can release
						// and return.
						p.Resume()
						return err
					}, lock.WithFencing())
				}()
				redistest.Recv(t, ctx, working, "the holder to start working")
				if err := redistest.Recv(t, ctx, done, "Do to return"); !errors.Is(err, lock.ErrLost) {
					t.Errorf("Do = %v, want ErrLost", err)
				}
				if res := checkHistory(t, r, porcupine.Ok); res != porcupine.Ok {
					t.Errorf("history: %s", res)
				}
				if len(r.hist.losses) != 1 {
					t.Fatalf("%d losses recorded, want 1", len(r.hist.losses))
				}
				left := checkLosses(t, r.hist.losses, r.ttl)
				sp := r.hist.spans[0]
				t.Logf("work cancelled %v after the black hole began, %v before the lock would have expired",
					time.Duration(sp.end-holed.Load()), left)
			})
		}
	}, redistest.Redis8, redistest.Cluster)
}

// TestDo_faults_lateWrite scripts the classic failure: holder A reads the
// store, then stops (a stop-the-world pause, and its network with it)
// before writing. Its keep-alive fails, its work is told at once, the lock
// expires, B obtains it and reads; only then does A wake up and write.
// With fencing on reads and writes A's late write is rejected and the
// history is linearizable; the negative controls use the same script on a
// store that fences writes only, or nothing, and porcupine must reject
// their histories as lost updates.
func TestDo_faults_lateWrite(t *testing.T) {
	tests := []struct {
		name string
		mode fenceMode
		want porcupine.CheckResult
	}{
		{"fenced reads and writes", fenceReadsAndWrites, porcupine.Ok},
		{"fenced writes only", fenceWritesOnly, porcupine.Illegal},
		{"no fencing", fenceOff, porcupine.Illegal},
	}
	s := redistest.Shared(t, redistest.Redis8)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			lcA, pA := faultClient(t, s, shortTimeouts())
			lcB, _ := faultClient(t, s, shortTimeouts())
			direct, _ := newClient(t, s, nil)
			r := &rig{key: redistest.Key(t, "lock"), ttl: faultTTL, store: &fencedStore{mode: tt.mode},
				hist: newHistory(t), direct: direct, ctx: ctx}

			aRead, bRead, aWrote := make(chan struct{}), make(chan struct{}), make(chan struct{})
			wait := func(ch <-chan struct{}) {
				select {
				case <-ch:
				case <-ctx.Done():
				}
			}
			sectionA := r.section(0, plan{
				afterRead: func() { close(aRead) },
				pause: func(int64) {
					pA.BlackHole()
					wait(bRead)
					pA.Resume()
				},
			})
			// B waited a TTL for the lock, then works past its first
			// refresh: the lock is its own for a full TTL from the attempt
			// that obtained it, not from when it began to wait.
			sectionB := r.section(1, plan{work: r.ttl / 2, afterRead: func() {
				close(bRead)
				wait(aWrote)
			}})
			errA, errB := make(chan error, 1), make(chan error, 1)
			go func() {
				errA <- lcA.Do(ctx, r.key, r.ttl, func(work context.Context) error {
					defer close(aWrote)
					return sectionA(work)
				}, lock.WithFencing())
			}()
			redistest.Recv(t, ctx, aRead, "A to read")
			go func() {
				errB <- lcB.Do(ctx, r.key, r.ttl, sectionB,
					lock.WithFencing(), lock.WithRetry(lock.LinearBackoff(10*time.Millisecond)), lock.WithMaxWait(10*time.Second))
			}()
			if err := redistest.Recv(t, ctx, errA, "A's Do"); !errors.Is(err, lock.ErrLost) {
				t.Errorf("A's Do = %v, want ErrLost", err)
			}
			if err := redistest.Recv(t, ctx, errB, "B's Do"); err != nil {
				t.Errorf("B's Do = %v", err)
			}

			res := checkHistory(t, r, tt.want)
			n, accepted, rejected, _ := r.store.counts()
			late, lateRejected := r.hist.lateWrites()
			t.Logf("porcupine: %s; store: n=%d, %d writes accepted, %d rejected; %d late writes, %d rejected",
				res, n, accepted, rejected, late, lateRejected)
			if res != tt.want {
				t.Errorf("porcupine says %s, want %s", res, tt.want)
			}
			if tt.want == porcupine.Ok && (late != 1 || lateRejected != 1 || n != 1) {
				t.Errorf("%d late writes, %d rejected, n=%d; want A's late write rejected and n=1", late, lateRejected, n)
			}
			if tt.want == porcupine.Illegal && (accepted != 2 || n != 1) {
				t.Errorf("%d writes accepted, n=%d; want both accepted and one increment lost", accepted, n)
			}
			checkSpans(t, r.hist.spans)
			if checkLosses(t, r.hist.losses, r.ttl); len(r.hist.losses) != 1 || r.hist.losses[0].holder != 0 {
				t.Errorf("losses %+v, want A's alone", r.hist.losses)
			}
		})
	}
}

// faultHolder is one holder in TestDo_faults_mutualExclusion: its own
// client through its own proxy.
type faultHolder struct {
	id     int
	lc     *lock.Client
	proxy  faultproxy.Faults
	pauser bool
	long   atomic.Bool // in a section whose work outlasts a refresh

	mu         sync.Mutex // guards the proxy's faults: the schedule and the holder's own pauses take turns
	pausing    bool
	faultUntil time.Time // a timed fault is on until then; zero if none
}

// outcomes counts how one holder's Do calls ended.
type outcomes struct{ ok, lost, notObtained, failed int }

// faultCounts counts the faults the schedule applied.
type faultCounts struct{ resets, drops, spikes, latency, holes, refusals, partitions int }

// pause is a stop-the-world pause that lasts until over is closed or d has
// passed: the holder's network stops too, so its keep-alive cannot
// refresh. The fault schedule leaves it alone.
func (h *faultHolder) pause(ctx context.Context, over <-chan struct{}, d time.Duration) {
	h.mu.Lock()
	h.pausing = true
	h.proxy.BlackHole()
	h.mu.Unlock()
	timer := time.NewTimer(d)
	select {
	case <-over:
	case <-timer.C:
	case <-ctx.Done():
	}
	timer.Stop()
	h.mu.Lock()
	h.proxy.Resume()
	h.pausing, h.faultUntil = false, time.Time{}
	h.mu.Unlock()
}

// run calls Do in a loop until ctx ends.
func (h *faultHolder) run(ctx context.Context, r *rig, rng *rand.Rand) (outcomes, error) {
	var o outcomes
	paused := false // once per holder: each pause stalls everyone for a TTL
	opts := []lock.DoOption{
		lock.WithFencing(), lock.WithRetry(lock.ExponentialBackoff(5*time.Millisecond, 40*time.Millisecond)), lock.WithMaxWait(2 * r.ttl)}
	for i := 0; ctx.Err() == nil; i++ {
		p := plan{work: time.Duration(5+rng.IntN(35)) * time.Millisecond}
		long := rng.IntN(10) < 2
		if long {
			p.work = time.Duration(300+rng.IntN(900)) * time.Millisecond
		}
		if h.pauser && !paused && i >= 2 {
			// Until the lock has expired and someone else has obtained it
			// and used the store, or three TTLs if nobody does. fn runs on
			// this goroutine, so paused needs no lock.
			p.pause = func(fence int64) {
				paused = true
				h.pause(r.ctx, r.store.passed(fence), 3*r.ttl)
			}
		}
		section := r.section(h.id, p)
		err := h.lc.Do(ctx, r.key, r.ttl, func(work context.Context) error {
			h.long.Store(long)
			defer h.long.Store(false)
			return section(work)
		}, opts...)
		switch {
		case err == nil:
			o.ok++
		case errors.Is(err, lock.ErrInvalid):
			return o, fmt.Errorf("holder %d: %w", h.id, err)
		case errors.Is(err, lock.ErrLost):
			o.lost++
		case errors.Is(err, lock.ErrNotObtained):
			o.notObtained++
		default:
			o.failed++ // a transport error: the faults at work
		}
		// Think time, so that a holder does not take the lock straight
		// back every time it releases it.
		timer := time.NewTimer(time.Duration(rng.IntN(20)) * time.Millisecond)
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
	return o, nil
}

// scheduleFaults applies random faults to random holders' proxies until
// ctx ends, then clears them.
func scheduleFaults(ctx context.Context, holders []*faultHolder, ttl time.Duration, rng *rand.Rand) faultCounts {
	var c faultCounts
	ms := func(lo, hi int) time.Duration { return time.Duration(lo+rng.IntN(hi-lo)) * time.Millisecond }
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			for _, h := range holders {
				h.mu.Lock()
				if !h.pausing {
					h.proxy.Resume()
				}
				h.mu.Unlock()
			}
			return c
		case now = <-tick.C:
		}
		for _, h := range holders {
			h.mu.Lock()
			if !h.pausing && !h.faultUntil.IsZero() && now.After(h.faultUntil) {
				h.proxy.Resume()
				h.faultUntil = time.Time{}
			}
			h.mu.Unlock()
		}
		if rng.IntN(3) != 0 {
			continue // about 7 faults a second
		}
		h, choice := holders[rng.IntN(len(holders))], rng.IntN(100)
		if choice < 15 {
			// A partition longer than the TTL, aimed at a holder in a long
			// section, so that its keep-alive fails while it works.
			h = nil
			for _, i := range rng.Perm(len(holders)) {
				if holders[i].long.Load() {
					h = holders[i]
					break
				}
			}
			if h == nil {
				continue
			}
		}
		h.mu.Lock()
		if h.pausing || !h.faultUntil.IsZero() {
			h.mu.Unlock()
			continue
		}
		switch {
		case choice < 15:
			h.proxy.BlackHole()
			h.faultUntil = now.Add(ttl + 300*time.Millisecond)
			c.partitions++
		case choice < 40:
			h.proxy.Reset()
			c.resets++
		case choice < 55:
			h.proxy.Drop()
			c.drops++
		case choice < 70:
			// Some spikes outlast the client's read timeout, some do not.
			h.proxy.SetSpikes(0.3, ms(50, 300))
			h.faultUntil = now.Add(ms(300, 800))
			c.spikes++
		case choice < 80:
			h.proxy.SetLatency(ms(2, 20))
			h.faultUntil = now.Add(ms(500, 1500))
			c.latency++
		case choice < 92:
			h.proxy.BlackHole()
			h.faultUntil = now.Add(ms(50, 300))
			c.holes++
		default:
			h.proxy.Refuse()
			h.proxy.Drop()
			h.faultUntil = now.Add(ms(100, 300))
			c.refusals++
		}
		h.mu.Unlock()
	}
}

// TestDo_faults_mutualExclusion runs holders that each reach the server
// through their own fault proxy, under a random fault schedule, with some
// holders pausing past the TTL between their check and their write. It
// checks the store's history exactly with porcupine, that no two holders'
// spans overlap, and that every holder whose keep-alive failed was told
// while the key was still its own. It runs on a Redis Cluster too, where
// each fault hits all of a holder's node connections.
func TestDo_faults_mutualExclusion(t *testing.T) {
	const (
		holders = 5
		pausers = 2
		runFor  = 8 * time.Second
	)
	tests := []struct {
		name string
		kind redistest.Kind
	}{
		{"redis8", redistest.Redis8},
		{"valkey", redistest.Valkey},
		// Each holder's faults hit all three nodes; the fence key shares
		// the lock key's slot, so the fenced obtain is one script there.
		{"cluster", redistest.Cluster},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // mostly waiting: the servers and holders are independent
			s := redistest.Shared(t, tt.kind)
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			seed := uint64(time.Now().UnixNano())
			if v := os.Getenv("LOCKTEST_FAULT_SEED"); v != "" {
				seed, _ = strconv.ParseUint(v, 10, 64)
			}
			t.Logf("fault schedule seed %d (set LOCKTEST_FAULT_SEED to repeat it)", seed)

			direct, _ := newClient(t, s, nil)
			r := &rig{key: redistest.Key(t, "lock"), ttl: faultTTL, store: &fencedStore{},
				hist: newHistory(t), direct: direct, ctx: ctx}
			hs := make([]*faultHolder, holders)
			for i := range hs {
				opts := shortTimeouts()
				if i == holders-1 {
					// One client waits for answers longer than the keep-
					// alive may: its work must still end in time.
					opts.ReadTimeout, opts.WriteTimeout = 2*time.Second, 2*time.Second
				}
				lc, p := faultClient(t, s, opts)
				hs[i] = &faultHolder{id: i, lc: lc, proxy: p, pauser: i < pausers}
			}

			runCtx, stop := context.WithTimeout(ctx, runFor)
			defer stop()
			type result struct {
				o   outcomes
				err error
			}
			results := make(chan result, holders)
			for i, h := range hs {
				rng := rand.New(rand.NewPCG(seed, uint64(i)+1))
				go func() {
					o, err := h.run(runCtx, r, rng)
					results <- result{o, err}
				}()
			}
			faults := make(chan faultCounts, 1)
			go func() { faults <- scheduleFaults(runCtx, hs, r.ttl, rand.New(rand.NewPCG(seed, 0))) }()

			var total outcomes
			for range holders {
				res := redistest.Recv(t, ctx, results, "a holder to stop")
				if res.err != nil {
					t.Error(res.err)
				}
				total.ok += res.o.ok
				total.lost += res.o.lost
				total.notObtained += res.o.notObtained
				total.failed += res.o.failed
			}
			fc := redistest.Recv(t, ctx, faults, "the fault schedule to stop")

			res := checkHistory(t, r, porcupine.Ok)
			n, accepted, rejected, refused := r.store.counts()
			late, lateRejected := r.hist.lateWrites()
			var ps faultproxy.Stats
			for _, h := range hs {
				st := h.proxy.Stats()
				ps.Accepted += st.Accepted
				ps.Refused += st.Refused
				ps.Dropped += st.Dropped
				ps.Reset += st.Reset
				ps.Spikes += st.Spikes
			}
			t.Logf("porcupine: %s over %d critical sections", res, len(r.hist.ops))
			t.Logf("Do: %d ok, %d lost, %d not obtained, %d transport errors; %d obtains",
				total.ok, total.lost, total.notObtained, total.failed, len(r.hist.spans))
			t.Logf("store: n=%d, %d writes accepted, %d rejected, %d reads refused; %d late writes, %d rejected",
				n, accepted, rejected, refused, late, lateRejected)
			minLeft := checkLosses(t, r.hist.losses, r.ttl)
			t.Logf("keep-alive losses: %d, each told with at least %v of the lock left", len(r.hist.losses), minLeft)
			t.Logf("faults: %+v; proxies: %d conns accepted, %d refused, %d dropped, %d reset, %d chunks spiked",
				fc, ps.Accepted, ps.Refused, ps.Dropped, ps.Reset, ps.Spikes)

			if res != porcupine.Ok {
				t.Errorf("porcupine says %s: the critical sections are not atomic increments", res)
			}
			checkSpans(t, r.hist.spans)
			if len(r.hist.losses) == 0 {
				t.Error("no keep-alive failed: the faults never bit")
			}
			if lateRejected == 0 {
				t.Errorf("none of %d late writes was rejected", late)
			}
			if n != accepted || accepted == 0 {
				t.Errorf("n=%d after %d accepted writes", n, accepted)
			}
		})
	}
}

// TestRunOnce_minHoldFromReply: an obtain whose reply is held up for longer
// than MinHold (a black hole here; a paused server in the robustness suite,
// which found two runs of one slot) still keeps the key MinHold after the
// reply, so an instance that calls right after the job skips it.
func TestRunOnce_minHoldFromReply(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := t.Context()
		rc, set := proxiedClient(t, s, &redis.Options{MaxRetries: -1, ReadTimeout: 10 * time.Second, DisableIdentity: true})
		slow, err := lock.New(rc, nil)
		if err != nil {
			t.Fatal(err)
		}
		other, err := lock.New(s.Client(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		key := redistest.Key(t, "job")
		const minHold = time.Second
		if err := rc.Ping(ctx).Err(); err != nil { // the black hole then holds the SET, not a dial
			t.Fatal(err)
		}
		set.All().BlackHole()
		resume := time.AfterFunc(minHold+minHold/2, set.All().Resume) // the fault's length is the point
		defer resume.Stop()
		ran, err := slow.RunOnce(ctx, key, time.Minute, func(context.Context) error { return nil }, lock.WithMinHold(minHold))
		if !ran || err != nil {
			t.Fatalf("RunOnce through the black hole = %v, %v; want it to run", ran, err)
		}
		again, err := other.RunOnce(ctx, key, time.Minute, func(context.Context) error { return nil })
		if again || err != nil {
			t.Fatalf("a second instance right after the job: RunOnce = %v, %v; want it skipped (the first's MinHold counted from its delayed send)", again, err)
		}
	}, redistest.Redis8, redistest.Valkey)
}
