package cache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/failpoint"
	"github.com/hotkv/stampede/internal/flight"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/lock"
)

// What every rebuild does, whichever lock it holds (miss.go: a claim on
// the value key; stale.go: the separate rebuild lock): run the loader
// once, counted and limited by LoadTimeout; then write on a context of its
// own, and announce the outcome to the processes waiting for it.

// writeTimeout bounds the writes that follow a load; they run on a context
// of their own so that a load which used up LoadTimeout can still store
// its result.
const writeTimeout = 5 * time.Second

// writeContext returns the context for the writes and the announcement
// that follow a load on ctx: ctx's values without its cancellation,
// limited by writeTimeout.
func writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
}

// loadRuns are the loader runs in progress in a process, by value key, so
// that the loader runs once per key at a time in the process, failing
// open too: a fail-open load joins the run in progress (loadAlone), and a
// background refresh does not start one beside another (refreshStale).
// Fills and refreshes are flights of their own (Cache.flights,
// Cache.refreshes); this is where they meet. The zero value is ready to
// use.
type loadRuns struct {
	mu sync.Mutex // guards m and every loadRun's joined
	m  map[string]*loadRun
}

// loadRun is one run of the loader for a key.
type loadRun struct {
	done   chan struct{} // closed when res and err are set
	res    outcome
	err    error
	joined int       // fail-open loads waiting for it
	began  time.Time // when it was registered
}

// begin registers a run of key, which the caller then runs (run) and
// ends (end). With idle set it registers none, and returns nil, while a
// run of key is in progress; otherwise the run begun is the one later
// callers join, even beside one in progress (a rebuild under a claim must
// not take a load that began before its claim).
func (g *loadRuns) begin(key string, idle bool) *loadRun {
	g.mu.Lock()
	defer g.mu.Unlock()
	if idle && g.m[key] != nil {
		return nil
	}
	return g.startLocked(key)
}

// startLocked registers a new run of key, under mu.
func (g *loadRuns) startLocked(key string) *loadRun {
	if g.m == nil {
		g.m = make(map[string]*loadRun)
	}
	r := &loadRun{done: make(chan struct{}), began: time.Now()}
	g.m[key] = r
	return r
}

// join returns the run of key in progress, counting the caller as
// waiting for it, or registers a new one that the caller runs (lead).
func (g *loadRuns) join(key string) (r *loadRun, lead bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r := g.m[key]; r != nil {
		r.joined++
		return r, false
	}
	return g.startLocked(key), true
}

// end records r's result for those that joined it.
func (g *loadRuns) end(key string, r *loadRun, res outcome, err error) {
	r.res, r.err = res, err
	g.mu.Lock()
	if g.m[key] == r {
		delete(g.m, key)
	}
	g.mu.Unlock()
	close(r.done)
}

// beginMany is begin(k.value, false) for each of ks: the runs of one
// batch load, which later callers of each key join.
func (g *loadRuns) beginMany(ks []keys) []*loadRun {
	g.mu.Lock()
	defer g.mu.Unlock()
	rs := make([]*loadRun, len(ks))
	for i, k := range ks {
		rs[i] = g.startLocked(k.value)
	}
	return rs
}

// beginIdle is begin(k.value, true) for each of ks: idle[i] says whether
// ks[i] had no run in progress and so got one, rs those runs, in ks's
// order (a background batch refresh leaves the others out).
func (g *loadRuns) beginIdle(ks []keys) (idle []bool, rs []*loadRun) {
	g.mu.Lock()
	defer g.mu.Unlock()
	idle = make([]bool, len(ks))
	for i, k := range ks {
		if g.m[k.value] == nil {
			idle[i] = true
			rs = append(rs, g.startLocked(k.value))
		}
	}
	return idle, rs
}

// joinedRun is a run of another caller that a batch's key joined.
type joinedRun struct {
	k keys
	r *loadRun
}

// joinMany is join for each of ks: the keys with no run in progress get
// one that the caller runs (lead, with their runs leadRuns); the others
// join the run in progress (joined, by value key).
func (g *loadRuns) joinMany(ks []keys) (lead []keys, leadRuns []*loadRun, joined map[string]joinedRun) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, k := range ks {
		if r := g.m[k.value]; r != nil {
			r.joined++
			if joined == nil {
				joined = make(map[string]joinedRun)
			}
			joined[k.value] = joinedRun{k: k, r: r}
			continue
		}
		lead = append(lead, k)
		leadRuns = append(leadRuns, g.startLocked(k.value))
	}
	return lead, leadRuns, joined
}

// forget makes later fail-open loads of key run the loader again rather
// than join the run in progress, whose result may predate a write.
func (g *loadRuns) forget(key string) {
	g.mu.Lock()
	delete(g.m, key)
	g.mu.Unlock()
}

// joiners returns how many fail-open loads wait for the run of key in
// progress (tests).
func (g *loadRuns) joiners(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if r := g.m[key]; r != nil {
		return r.joined
	}
	return 0
}

// run calls the loader once, limited by LoadTimeout, counting it; the
// run is the one fail-open loads of the key join meanwhile.
func (c *Cache) run(ctx context.Context, k keys, load loader.Func[[]byte]) (outcome, error) {
	return c.runAs(ctx, k, load, c.runs.begin(k.value, false))
}

// panicError is the flight.Recover of the cache's flights and loader
// calls: a panic becomes a *loader.PanicError, which is what callers match
// and every waiter of the flight gets.
func panicError(value any, stack []byte) error {
	return &loader.PanicError{Value: value, Stack: stack}
}

// runAs runs the loader as r, registered with c.runs, and ends r. Its
// result, an error too, is a load's (outcome.src).
func (c *Cache) runAs(ctx context.Context, k keys, load loader.Func[[]byte], r *loadRun) (res outcome, err error) {
	defer func() {
		res.src, res.user = fromLoad, k.user
		c.runs.end(k.value, r, res, err)
	}()
	ctx, cancel := context.WithTimeout(ctx, c.s.loadTimeout)
	defer cancel()
	start := time.Now()
	c.n.loads.Add(1)
	payload, err := flight.Call(ctx, load, panicError)
	c.emit(ctx, EventLoad, k.user, time.Since(start), err) // ctx: the loader's own, as Event.Context says
	switch {
	case errors.Is(err, loader.ErrNotFound):
		return outcome{notFound: true}, nil
	case err != nil: // counted in LoadErrors by emit
		return outcome{}, fmt.Errorf("cache: load %q: %w", k.user, err)
	}
	return outcome{payload: payload}, nil
}

// loadAlone runs the loader without the server (fail open), or takes
// the result of the run of the key in progress in this process (a
// background refresh's, a rebuild's, another fail-open load's): without
// the server there is nothing fresher to wait for, and the loader runs
// once per key at a time in the process.
func (c *Cache) loadAlone(ctx context.Context, k keys, load loader.Func[[]byte]) (outcome, error) {
	for {
		r, lead := c.runs.join(k.value)
		if lead {
			// Counted when the loader runs: a call that joins another
			// run is not a load (Stats.FailOpenLoads, EventFailOpen).
			c.emit(ctx, EventFailOpen, k.user, 0, nil)
			res, err := c.runAs(ctx, k, load, r)
			res.seen = r.began // what callers that joined its flight compare (outcome.accepts)
			return res, err
		}
		select {
		case <-r.done:
		case <-ctx.Done():
			return outcome{}, fmt.Errorf("cache: load %q: %w", k.user, ctx.Err())
		}
		if errors.Is(r.err, context.Canceled) && ctx.Err() == nil {
			continue // the run's callers left, not this one: run again
		}
		return outcome{payload: r.res.payload, notFound: r.res.notFound, seen: r.began, src: fromRun}, r.err
	}
}

// loaded is the result of a load run while holding a claim or the rebuild
// lock, with what the write that follows needs.
type loaded struct {
	res  outcome
	err  error
	it   itemSettings  // the item's settings, with the TTLs the loader set through Expire
	took time.Duration // how long the loader ran; stored for Expiry.EarlyRefresh
}

// storable reports whether the load left something to write: a value, or a
// not-found when Expiry.Negative stores it. Otherwise the lock is freed and
// the waiters are told what happened.
func (ld loaded) storable() bool {
	return ld.err == nil && !(ld.res.notFound && ld.it.negative == 0)
}

// loadHolding runs the loader while l is held, keeping l alive until the
// loader returns. A value larger than MaxValueSize becomes an error: it
// would not be stored.
//
// NOTE: l is not released here; the caller's write decides what becomes
// of it. A claim or lock lost during the load is not reported either: the
// write that follows is conditional and finds out.
//
// old is the stored value a rebuild beside it replaces (nil for a claim
// on the value key): a load that waited for a backend permit reads the
// key again, and does not load if the value, or its claim, is gone
// (errRebuilt; l is freed).
func (c *Cache) loadHolding(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], l *lock.Lock, old []byte) loaded {
	return c.loadHoldingAs(ctx, k, it, load, l, c.runs.begin(k.value, false), old)
}

// loadHoldingAs is loadHolding run as r (see loadRuns.begin).
func (c *Cache) loadHoldingAs(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], l *lock.Lock, r *loadRun, old []byte) loaded {
	_, stop := l.KeepAlive(ctx, c.s.lockTTL, 0)
	// A capped backend's permit, under the claim kept alive: a load that
	// gets none ends as a failed load does.
	// (A Batcher's Get takes it for its round's loader call instead.)
	done, waited, err := c.permit(ctx, it.unlessRound(), []keys{k})
	if err == nil && waited && c.rebuilt(ctx, k, l, old) {
		done()
		err = errRebuilt
	}
	if err != nil {
		c.runs.end(k.value, r, outcome{}, err)
		_ = stop()
		if errors.Is(err, errRebuilt) {
			c.release(ctx, k, l)
		}
		return loaded{err: err, it: it}
	}
	// The tags' epochs before the loader runs: an invalidation from now
	// on makes what it loads invalidated (see tags.go).
	var tags []codec.TagRef
	if len(it.tags) > 0 {
		tags = c.loadTags(ctx, k, it.tags)
	}
	start := time.Now()
	exp := &expiry{}
	res, err := c.runAs(context.WithValue(ctx, expiryKey{}, exp), k, load, r)
	done() // the permit goes back as soon as the backend is done with
	res.tags = tags
	took := time.Since(start)
	if exp.set {
		it.fresh, it.stale = exp.fresh, exp.stale
	}
	_ = stop() // a lost claim is seen by the conditional write that follows
	if err == nil && !res.notFound && len(res.payload) > c.s.maxSize {
		err = fmt.Errorf("%w: %q is %d bytes, MaxValueSize is %d", ErrValueTooLarge, k.user, len(res.payload), c.s.maxSize)
	}
	return loaded{res: res, err: err, it: it, took: took}
}

// release frees l; finding it gone already (expired, or removed by a
// Delete or Set) is not an error.
func (c *Cache) release(ctx context.Context, k keys, l *lock.Lock) {
	if err := l.Release(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
		c.serverError(k.user, err)
	}
}

// noteWrite counts a conditional write (or delete) that failed, or that
// did not happen because the key changed since it was read: a Delete or
// Set since then stands.
func (c *Cache) noteWrite(k keys, wrote bool, err error) {
	switch {
	case err != nil:
		c.serverError(k.user, err)
	case !wrote:
		c.emit(context.Background(), EventWriteSkipped, k.user, 0, nil)
	}
}

// refused reports whether a write was refused by the server's ACL. The
// waiters' writes would be refused too: they are told at once, rather than
// left waiting for a value that will not come.
func refused(err error) bool {
	return errors.Is(err, ErrPermission) || redisx.IsNoPerm(err)
}

// announceWrite tells the waiting processes that the rebuild holding l
// wrote val (wrote) or found the key changed (!wrote): both read the key
// again, unless val, small enough, comes along.
func (c *Cache) announceWrite(ctx context.Context, k keys, l *lock.Lock, wrote bool, val string) {
	inline := ""
	if wrote {
		inline = inlined(val)
	}
	c.announce(ctx, k, l, noticeValue, inline)
}

// inlined is what an announcement of the written value val carries: val
// itself when it is small enough, else nothing (the waiters read it).
func inlined(val string) string {
	if len(val) <= inlineMax {
		return val
	}
	return ""
}

// announcedWith ends an announcement that the write published in its own
// script (replaceAnnouncing) as announce ends one it published: the
// point, this process's near cache, and the publish's outcome err,
// counted and reported where the server refused it.
func (c *Cache) announcedWith(ctx context.Context, k keys, err error) {
	defer failpoint.Inject(ctx, failpoint.CacheAnnounced)
	c.nearDrop(k) // as announce does (replaceAnnouncing dropped it before the write too)
	if !c.ann.published(err) && err != nil {
		c.serverError(k.user, err)
	}
}

// announceNothing tells the waiting processes that the rebuild holding l
// stored nothing: the load failed with err, or found nothing (err == nil).
func (c *Cache) announceNothing(ctx context.Context, k keys, l *lock.Lock, err error) {
	if err != nil {
		c.announce(ctx, k, l, noticeError, err.Error())
	} else {
		c.announce(ctx, k, l, noticeNotFound, "")
	}
}

// announce publishes the outcome of the rebuild holding l. A failed
// publish costs the waiters a poll interval, not their answer. A failure
// ('e') leaves its marker too, in the same pipeline and before the
// announcement (failed.go): the caller frees l only after announce.
func (c *Cache) announce(ctx context.Context, k keys, l *lock.Lock, kind byte, text string) {
	// The point fires as announce returns, published or not.
	defer failpoint.Inject(ctx, failpoint.CacheAnnounced)
	c.nearDrop(k) // this process wrote, or found the key changed
	if c.down() {
		// The write just failed on the connection, or another call's did:
		// do not pay a second timeout; the waiters' poll finds the result.
		return
	}
	msg := message(kind, k.value, l.Token(), text)
	var err error
	if kind == noticeError {
		pipe := c.rc.Pipeline()
		mark := c.queueFailure(ctx, pipe, k, l.Token(), text)
		pub := c.ann.publish(ctx, pipe, k.value, msg)
		whole := redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
		c.failureWritten(k, mark.Err(), whole)
		err = pub.Err()
	} else {
		err = c.ann.publishOne(ctx, k.value, msg)
	}
	if !c.ann.published(err) && err != nil { // a refusal is counted and logged there, not as a failed server
		c.serverError(k.user, err)
	}
}
