package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/failpoint"
	"github.com/hotkv/stampede/internal/flight"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/lock"
)

// GetOrLoadMany's loads. A batch is the missing keys one call leads (it
// started their flights in this process): it claims them together, calls
// the loader once for the keys it claimed, writes each value in place of
// its claim, and announces them in one pipeline. The claims are the ones
// claimMiss takes, through package lock (Client.ObtainMany: SET NX PX GET
// on the value key, one pipeline), and every write after the load is one
// of the claims' own (KeepAliveMany, ReplaceMany, Release; each round one
// pipeline): a Delete or Set during the load removes the
// claim, and the write becomes a no-op. Keys whose claim another process
// took continue as GetOrLoad's fill (they wait for it). Lock values are
// written by package lock alone.
//
// The stale values a call served are refreshed the same way, under the
// rebuild locks (stale.go), by refreshBatch.

// writeFanout bounds the releases of a batch's claims in flight at once
// (announceAll): calls of package lock, whose concurrent calls share
// pipelines.
const writeFanout = 64

// batchResult is what a batch hands one key's flight.
type batchResult struct {
	res  outcome
	err  error
	fill bool // not settled by the batch: the flight continues as fill
	// claim is the token of another process's claim that the batch found
	// where it tried to claim the key: the flight waits for it.
	claim string
	seen  time.Time // when that read was sent
}

// batch is the missing keys one GetOrLoadMany call leads.
type batch struct {
	c     *Cache
	it    itemSettings
	load  manyLoader
	down  bool // failing open: load without the server, store nothing
	order []keys
	res   map[string]chan batchResult // by value key; buffered
}

func newBatch(c *Cache, it itemSettings, load manyLoader, down bool) *batch {
	return &batch{c: c, it: it, load: load, down: down, res: make(map[string]chan batchResult)}
}

// member adds k to the batch and returns the function for k's flight: it
// waits for the batch's result for k; for another process's claim found
// in its place, waits for that (on w, registered before the read sent at
// sent; nil when failing open); and continues as fill (with single, a
// loader of k alone) when the batch did not settle k.
func (b *batch) member(k keys, single loader.Func[[]byte], w *waiter, sent time.Time) func(context.Context) (outcome, error) {
	ch := make(chan batchResult, 1)
	b.res[k.value] = ch
	b.order = append(b.order, k)
	c := b.c
	return func(ctx context.Context) (outcome, error) {
		select {
		case r := <-ch:
			if r.claim != "" && w != nil {
				return c.awaitClaim(ctx, k, b.it, single, w, r.claim, r.seen)
			}
			if w != nil {
				c.ann.unregister(k.value, w)
			}
			if r.fill {
				return c.fill(ctx, k, b.it, single, nil, firstRead{})
			}
			return r.res, r.err
		case <-ctx.Done():
			if w != nil {
				c.ann.unregister(k.value, w)
			}
			return outcome{}, fmt.Errorf("cache: load %q: %w", k.user, ctx.Err())
		}
	}
}

// drop takes k, just added by member, out of the batch: the caller joined
// a flight of k that another caller started.
func (b *batch) drop(k keys) {
	if n := len(b.order); n > 0 && b.order[n-1].value == k.value {
		b.order = b.order[:n-1]
		delete(b.res, k.value)
	}
}

func (b *batch) send(k keys, r batchResult) {
	if ch, ok := b.res[k.value]; ok {
		delete(b.res, k.value)
		ch <- r
	}
}

// start runs the batch in the background, on a context of the Cache's
// detached from the caller's (keeping its values): the flights of its keys
// wait for it.
func (b *batch) start(ctx context.Context) {
	if len(b.order) == 0 {
		return
	}
	bctx, finish, err := b.c.background(ctx, b.it.wait)()
	if err != nil {
		for _, k := range b.order {
			b.send(k, batchResult{err: err})
		}
		return
	}
	go func() {
		defer finish()
		defer func() {
			// Every flight waiting for the batch gets an answer, whatever
			// happened (the loader's own panic is a *loader.PanicError
			// already; this is for the batch's).
			err := errors.New("cache: batch load ended without a result")
			if r := recover(); r != nil {
				err = &loader.PanicError{Value: r, Stack: debug.Stack()}
			}
			for _, k := range b.order {
				b.send(k, batchResult{err: err})
			}
		}()
		b.run(bctx)
	}()
}

// heldClaim is a claim (or rebuild lock) a batch holds on k.
type heldClaim struct {
	k keys
	l *lock.Lock
}

// run claims the batch's keys, loads those it claimed in one loader call,
// and ends each claim with its result.
func (b *batch) run(ctx context.Context) {
	if b.down {
		b.loadAlone(ctx, b.order)
		return
	}
	claimed := time.Now() // outcome.seen of what the loads rest on
	won, alone := b.claim(ctx)
	if len(won) == 0 && len(alone) == 0 {
		return
	}
	b.loadClaimed(ctx, won, alone, claimed)
}

// claim claims the batch's keys together (lock.ObtainMany: one pipeline
// of SET NX GET). It returns the claims it took (won) and the keys the
// server failed for (alone: loaded without it), and sends every other key
// its result: wait for what another process stored, or go on as fill.
func (b *batch) claim(ctx context.Context) (won []heldClaim, alone []keys) {
	c := b.c
	ks := make([]keys, 0, len(b.order))
	names := make([]string, 0, len(b.order))
	for _, k := range b.order {
		if err := c.permitted(ctx, k, nil); err != nil {
			b.send(k, batchResult{fill: true}) // fill reports it, as for GetOrLoad
			continue
		}
		ks = append(ks, k)
		names = append(names, k.value)
	}
	if len(ks) == 0 {
		return nil, nil
	}
	sent := time.Now()
	tries, err := c.locks.ObtainMany(ctx, names, c.s.lockTTL)
	if err != nil { // the batch's context ended (Close)
		for _, k := range ks {
			b.send(k, batchResult{err: fmt.Errorf("cache: load %q: %w", k.user, ErrClosed)})
		}
		return nil, nil
	}
	for i, t := range tries {
		k := ks[i]
		switch {
		case t.Lock != nil:
			won = append(won, heldClaim{k: k, l: t.Lock})
		case t.Err == nil:
			// Another process was first: wait for its claim, or take
			// what it stored.
			c.n.contention.Add(1)
			b.send(k, c.foundInstead(ctx, k, t.Held, sent))
		case ctx.Err() != nil:
			b.send(k, batchResult{err: fmt.Errorf("cache: load %q: %w", k.user, ErrClosed)})
		case redisx.IsReply(t.Err) || errors.Is(t.Err, ErrPermission):
			// A refusal: fill meets it again and answers as GetOrLoad does.
			b.send(k, batchResult{fill: true})
		default:
			c.serverError(k.user, t.Err)
			alone = append(alone, k)
		}
	}
	return won, alone
}

// loadClaimed calls the loader once for the keys of the claims won and
// the keys alone (the server failed for them: fail open), keeping the
// claims alive meanwhile, and sends each key its result: alone at once,
// won once its value replaced its claim (writeBack). The load is each
// key's run in this process (loadRuns): a fail-open GetOrLoad of one of
// them meanwhile joins it, and a key alone that another run of this
// process loads already joins that run instead.
func (b *batch) loadClaimed(ctx context.Context, won []heldClaim, alone []keys, claimed time.Time) {
	c := b.c
	lead, leadRuns, joined := c.runs.joinMany(alone)
	for _, k := range lead {
		c.emit(ctx, EventFailOpen, k.user, 0, nil)
	}
	ks := make([]keys, 0, len(won)+len(lead))
	for _, cl := range won {
		ks = append(ks, cl.k)
	}
	rs := append(c.runs.beginMany(ks), leadRuns...)
	ks = append(ks, lead...)
	var ld loadedMany
	if len(won) > 0 {
		failpoint.Inject(ctx, failpoint.CacheClaimed)
	}
	if len(ks) > 0 {
		stop := c.keepAll(ctx, won)
		// Fail-open keys alone take no permit: the server failed for them.
		ld = c.runManyHolding(ctx, b.it, ks, rs, len(won), b.load, nil)
		stop()
	}
	for _, k := range lead {
		res, err := c.resultOf(k, ld.got, ld.err)
		b.send(k, batchResult{res: res, err: err})
	}
	results := c.writeBack(ctx, won, ld, claimed)
	for i, cl := range won {
		b.send(cl.k, results[i])
	}
	b.awaitRuns(ctx, joined)
}

// awaitRuns sends each key of joined the result of the run of this
// process it joined (a refresh's, a rebuild's, another fail-open load's),
// as loadAlone does for GetOrLoad.
func (b *batch) awaitRuns(ctx context.Context, joined map[string]joinedRun) {
	for _, j := range joined {
		select {
		case <-j.r.done:
		case <-ctx.Done():
			b.send(j.k, batchResult{err: fmt.Errorf("cache: load %q: %w", j.k.user, ErrClosed)})
			continue
		}
		if errors.Is(j.r.err, context.Canceled) {
			b.send(j.k, batchResult{fill: true}) // the run's callers left: go the way of GetOrLoad
			continue
		}
		b.send(j.k, batchResult{res: outcome{payload: j.r.res.payload, notFound: j.r.res.notFound, src: fromRun}, err: j.r.err})
	}
}

// loadedMany is what one call of a batch loader returned (runMany).
type loadedMany struct {
	got  map[string]encodedValue
	it   itemSettings // with the TTLs the loader set through Expire
	took time.Duration
	err  error
	tags []codec.TagRef // the epochs of the batch's tags before it ran (see tags.go)
	// rebuilt names (by value key) the keys of a refresh left out of the
	// load: their value changed while it waited for a permit.
	rebuilt map[string]bool
}

// writeBack replaces each claim of won (taken at claimed) with its entry
// from ld, together (lock.Client.ReplaceMany: one pipeline), or ends it
// where there is nothing to store, announces the outcomes, then frees the
// claims that nothing replaced, and returns the result of each claim's
// key.
func (c *Cache) writeBack(ctx context.Context, won []heldClaim, ld loadedMany, claimed time.Time) []batchResult {
	if len(won) == 0 {
		return nil // the batch's keys were loaded without the server, or by others
	}
	wctx, cancel := writeContext(ctx)
	defer cancel()
	failpoint.Inject(wctx, failpoint.CacheLoaded)
	notes := make([]announcement, len(won))
	results := make([]batchResult, len(won))
	vals := make([]string, len(won))
	var rs []lock.Replacement
	var at []int // the index in won of each of rs
	for i, cl := range won {
		res, err := c.resultOf(cl.k, ld.got, ld.err)
		res.claim, res.seen, res.tags = cl.l.Token(), claimed, ld.tags
		results[i] = batchResult{res: res, err: err}
		if err != nil || res.notFound && ld.it.negative == 0 {
			notes[i] = nothing(cl, err)
			notes[i].free = true
			continue
		}
		val, ttl := c.entry(ld.it, res.payload, res.notFound, ld.took, ld.tags)
		vals[i] = val
		rs = append(rs, lock.Replacement{Lock: cl.l, Value: val, TTL: ttl})
		at = append(at, i)
	}
	if len(rs) > 0 {
		errs := c.locks.ReplaceMany(wctx, rs)
		failpoint.Inject(wctx, failpoint.CacheWritten)
		for j, i := range at {
			notes[i] = c.replacedClaim(won[i], vals[i], errs[j])
		}
	}
	c.announceAll(wctx, notes)
	return results
}

// replacedClaim is the announcement of the claim cl after its Replace by
// val returned werr: a write that found the claim gone is no error (the
// key moved on: waiters read it again).
func (c *Cache) replacedClaim(cl heldClaim, val string, werr error) announcement {
	wrote := werr == nil
	if errors.Is(werr, lock.ErrNotHeld) {
		werr = nil
	}
	return c.wroteNote(cl, val, wrote, werr)
}

// wroteNote counts a rebuild's conditional write of val (wrote, werr) and
// returns its announcement: val where it was written (and small enough),
// "read the key again" where the key had moved on, and an error where the
// ACL refused the write, which frees cl if the server lets it.
func (c *Cache) wroteNote(cl heldClaim, val string, wrote bool, werr error) announcement {
	c.noteWrite(cl.k, wrote, werr)
	if refused(werr) {
		return announcement{cl: cl, kind: noticeError, text: werr.Error(), free: true}
	}
	return written(cl, wrote, val)
}

// foundInstead is what a key's flight does with old, found stored where
// the batch tried to claim the key by a read sent at sent: wait for the
// claim of another process, take a fresh value or not-found, and
// otherwise go the way of GetOrLoad (fill).
func (c *Cache) foundInstead(ctx context.Context, k keys, old string, sent time.Time) batchResult {
	rd := c.decide([]byte(old), c.s.now())
	c.withTags(ctx, &rd)
	switch {
	case rd.use == useWait:
		return batchResult{claim: rd.claim, seen: sent}
	case (rd.use == useValue || rd.use == useNotFound) && !rd.stale:
		return batchResult{res: outcome{payload: rd.e.Payload, notFound: rd.e.NotFound, seen: sent, tags: rd.e.Tags}}
	}
	return batchResult{fill: true}
}

// loadAlone loads ks in one loader call without the server (fail open):
// nothing is stored. A key that a run of this process loads already (a
// refresh, a rebuild, another fail-open load) takes that run's result.
func (b *batch) loadAlone(ctx context.Context, ks []keys) {
	c := b.c
	lead, rs, joined := c.runs.joinMany(ks)
	for _, k := range lead {
		c.emit(ctx, EventFailOpen, k.user, 0, nil)
	}
	if len(lead) > 0 {
		ld := c.runManyAs(ctx, b.it, lead, rs, b.load)
		for _, k := range lead {
			res, err := c.resultOf(k, ld.got, ld.err)
			b.send(k, batchResult{res: res, err: err})
		}
	}
	b.awaitRuns(ctx, joined)
}

// resultOf is k's outcome of a batch load that returned got and lerr:
// this process's load's, an error too (outcome.src).
func (c *Cache) resultOf(k keys, got map[string]encodedValue, lerr error) (outcome, error) {
	loaded := outcome{src: fromLoad, user: k.user}
	if lerr != nil {
		return loaded, lerr
	}
	ev, ok := got[k.user]
	switch {
	case !ok:
		loaded.notFound = true
		return loaded, nil
	case ev.err != nil:
		return loaded, ev.err
	case len(ev.payload) > c.s.maxSize:
		return loaded, fmt.Errorf("%w: %q is %d bytes, MaxValueSize is %d", ErrValueTooLarge, k.user, len(ev.payload), c.s.maxSize)
	}
	loaded.payload = ev.payload
	return loaded, nil
}

// runMany calls the batch loader once for users, limited by LoadTimeout,
// counting it as one load (its Event names the first key). it comes back
// with the TTLs the loader set through Expire.
func (c *Cache) runMany(ctx context.Context, it itemSettings, users []string, load manyLoader) (map[string]encodedValue, itemSettings, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, c.s.loadTimeout)
	defer cancel()
	exp := &expiry{}
	ctx = context.WithValue(ctx, expiryKey{}, exp)
	start := time.Now()
	c.n.loads.Add(1)
	got, err := flight.Call(ctx, func(ctx context.Context) (map[string]encodedValue, error) {
		return load(ctx, users)
	}, panicError)
	took := time.Since(start)
	c.emit(ctx, EventLoad, users[0], took, err) // ctx: the loader's own, as Event.Context says
	if exp.set {
		it.fresh, it.stale = exp.fresh, exp.stale
	}
	switch {
	case errors.Is(err, loader.ErrNotFound):
		return nil, it, took, nil // none of them: every key is missing from the map
	case err != nil: // counted in LoadErrors by emit
		return nil, it, took, fmt.Errorf("cache: load %d keys: %w", len(users), err)
	}
	return got, it, took, nil
}

// runManyHolding is runManyAs for a batch whose first claimed keys of ks
// are claimed (or rebuild-locked) and kept alive: with a capped backend's
// permit (see permit), taken before the tags' epochs are read and given
// back as soon as the loader returns; a batch that gets none ends every
// run with that error, and the loader does not run.
//
// olds, for a refresh (nil for claims), are the stored values its keys
// replace: a batch that waited for its permit reads them again and leaves
// out each key whose value changed meanwhile (another process loaded it),
// ending its run with errRebuilt and naming it in the result's rebuilt.
func (c *Cache) runManyHolding(ctx context.Context, it itemSettings, ks []keys, rs []*loadRun, claimed int, load manyLoader, olds [][]byte) loadedMany {
	done, waited, err := c.permit(ctx, it, ks[:claimed])
	if err != nil {
		for i, k := range ks {
			c.runs.end(k.value, rs[i], outcome{}, err)
		}
		return loadedMany{it: it, err: err}
	}
	var rebuilt map[string]bool
	if waited && olds != nil {
		ks, rs, rebuilt = c.leaveRebuilt(ctx, ks, rs, olds)
		if len(ks) == 0 {
			done()
			return loadedMany{it: it, rebuilt: rebuilt}
		}
	}
	var tags []codec.TagRef
	if claimed > 0 && len(it.tags) > 0 {
		tags = c.loadTags(ctx, ks[0], it.tags)
	}
	ld := c.runManyAs(ctx, it, ks, rs, load)
	done()
	ld.tags, ld.rebuilt = tags, rebuilt
	return ld
}

// leaveRebuilt returns ks and rs without the keys that no longer hold
// their olds (a failed read is no evidence: all are kept), whose runs it
// ends with errRebuilt, and those keys, by value key.
func (c *Cache) leaveRebuilt(ctx context.Context, ks []keys, rs []*loadRun, olds [][]byte) ([]keys, []*loadRun, map[string]bool) {
	same := c.unchanged(ctx, ks, olds)
	var rebuilt map[string]bool
	keptK, keptR := ks[:0:0], rs[:0:0]
	for i, k := range ks {
		if same[i] {
			keptK, keptR = append(keptK, k), append(keptR, rs[i])
			continue
		}
		if rebuilt == nil {
			rebuilt = make(map[string]bool)
		}
		rebuilt[k.value] = true
		c.runs.end(k.value, rs[i], outcome{}, errRebuilt)
	}
	return keptK, keptR, rebuilt
}

// runManyAs is runMany for ks as the runs rs (rs[i] is ks[i]'s, see
// loadRuns): each run ends with its key's result.
func (c *Cache) runManyAs(ctx context.Context, it itemSettings, ks []keys, rs []*loadRun, load manyLoader) (ld loadedMany) {
	defer func() {
		for i, k := range ks {
			res, err := c.resultOf(k, ld.got, ld.err)
			c.runs.end(k.value, rs[i], res, err)
		}
	}()
	users := make([]string, len(ks))
	for i, k := range ks {
		users[i] = k.user
	}
	ld.got, ld.it, ld.took, ld.err = c.runMany(ctx, it, users, load)
	return ld
}

// keepAll keeps the locks of held alive together (lock.Client.
// KeepAliveMany: one pipeline of refreshes every LockTTL/3) until stop is
// called. A lost lock is seen by the conditional write that follows.
func (c *Cache) keepAll(ctx context.Context, held []heldClaim) (stop func()) {
	locks := make([]*lock.Lock, len(held))
	for i, cl := range held {
		locks[i] = cl.l
	}
	return c.locks.KeepAliveMany(ctx, c.s.lockTTL, 0, locks)
}

// announcement is one rebuild's outcome, to publish (see announce).
type announcement struct {
	cl   heldClaim
	kind byte
	text string
	free bool // release cl.l once the outcome is published (see loadClaimed)
}

func nothing(cl heldClaim, err error) announcement {
	if err != nil {
		return announcement{cl: cl, kind: noticeError, text: err.Error()}
	}
	return announcement{cl: cl, kind: noticeNotFound}
}

func written(cl heldClaim, wrote bool, val string) announcement {
	a := announcement{cl: cl, kind: noticeValue}
	if wrote && len(val) <= inlineMax {
		a.text = val
	}
	return a
}

// announceAll publishes notes in one pipeline, as announce does one by
// one (a failure with its marker first, failed.go), then frees the locks
// the notes say to free: every path that frees a claim announces first,
// so that a waiter whose read finds the claim gone has the outcome
// already on its way, or a failure's marker to read.
func (c *Cache) announceAll(ctx context.Context, notes []announcement) {
	for _, a := range notes {
		c.nearDrop(a.cl.k) // this process wrote, or found the key changed
	}
	defer func() {
		failpoint.Inject(ctx, failpoint.CacheAnnounced) // published or not
		parallel(len(notes), func(i int) {
			if a := notes[i]; a.free {
				c.release(ctx, a.cl.k, a.cl.l)
			}
		})
	}()
	if c.down() || len(notes) == 0 {
		return
	}
	pipe := c.rc.Pipeline()
	cmds := make([]*redis.IntCmd, len(notes))
	marks := make([]*redis.StatusCmd, len(notes))
	for i, a := range notes {
		if a.kind == noticeError {
			marks[i] = c.queueFailure(ctx, pipe, a.cl.k, a.cl.l.Token(), a.text)
		}
		cmds[i] = c.ann.publish(ctx, pipe, a.cl.k.value, message(a.kind, a.cl.k.value, a.cl.l.Token(), a.text))
	}
	whole := redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
	for i, m := range marks {
		if m != nil {
			c.failureWritten(notes[i].cl.k, m.Err(), whole)
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			if !c.ann.published(err) {
				c.serverError(notes[i].cl.k.user, err)
			}
			return
		}
	}
	c.ann.published(nil)
}

// refreshMany starts one background refresh of the stale values stale,
// leaving out the keys this process refreshes already (each such value
// served counts as a reader of that refresh: Event.Callers); the
// refreshes group holds each key meanwhile, so that GetOrLoad does not
// start a second one.
func (c *Cache) refreshMany(ctx context.Context, it itemSettings, stale []staleKey, load manyLoader) {
	done := make(chan struct{})
	var loaded map[string]bool // the keys refreshBatch loaded; read once done is closed
	var mine []staleKey
	for _, s := range stale {
		if c.refreshes.Attach(s.k.value) {
			continue
		}
		user := s.k.user
		started := c.refreshes.Start(s.k.value, c.background(ctx, it.wait), func(ctx context.Context) (string, error) {
			select {
			case <-done:
				if loaded[user] {
					return user, nil
				}
			case <-ctx.Done():
			}
			return "", nil
		})
		if started {
			mine = append(mine, staleKey{k: s.k, old: bytes.Clone(s.old)})
		}
	}
	if len(mine) == 0 {
		close(done)
		return
	}
	rctx, finish, err := c.background(ctx, it.wait)()
	if err != nil {
		close(done)
		return
	}
	go func() {
		defer finish()
		defer close(done)
		defer func() {
			if r := recover(); r != nil {
				c.log(slog.LevelError, "background batch refresh panicked", "panic", r, "stack", string(debug.Stack()))
			}
		}()
		loaded = c.refreshBatch(rctx, it, mine, load)
	}()
}

// refreshBatch replaces the stale values of stale whose rebuild lock this
// process gets, with one loader call, as refreshStale does for one.
// Nothing it meets is anyone's error. A key that a run of this process
// loads already (a fail-open load, which began while the server failed)
// is left out, as refreshStale leaves it: the stale value goes on being
// served, and a later read refreshes it. It returns the keys it loaded
// (by the caller's key).
func (c *Cache) refreshBatch(ctx context.Context, it itemSettings, stale []staleKey, load manyLoader) (loaded map[string]bool) {
	return c.refreshHeld(ctx, it, c.lockStale(ctx, stale), load)
}

// refreshHeld is refreshBatch once the rebuild locks are held: the keys
// whose value changed meanwhile are let go, and the others loaded with one
// loader call, keeping their locks alive (from when the earliest was
// taken: a Batcher's round held them a while already), and written, each
// only if its key still holds the stale value. Every lock of held is
// freed, or kept for Expiry.RefreshBackoff after a failed load. It
// returns the keys it loaded (by the caller's key).
func (c *Cache) refreshHeld(ctx context.Context, it itemSettings, held []staleLock, load manyLoader) (loaded map[string]bool) {
	held = c.stillStale(ctx, held)
	if len(held) == 0 {
		return nil
	}
	ks := make([]keys, len(held))
	for i, t := range held {
		ks[i] = t.cl.k
	}
	idle, rs := c.runs.beginIdle(ks)
	kept := held[:0]
	for i, t := range held {
		if !idle[i] {
			c.release(ctx, t.cl.k, t.cl.l)
			continue
		}
		kept = append(kept, t)
	}
	held = kept
	if len(held) == 0 {
		return nil
	}
	ks = ks[:0]
	locks := make([]heldClaim, len(held))
	loaded = make(map[string]bool, len(held))
	for i, t := range held {
		ks, locks[i] = append(ks, t.cl.k), t.cl
		loaded[t.cl.k.user] = true
		c.emit(ctx, EventRefresh, t.cl.k.user, 0, nil)
	}
	failpoint.Inject(ctx, failpoint.CacheRefreshClaimed)
	stop := c.keepAll(ctx, locks)
	olds := make([][]byte, len(held))
	for i, t := range held {
		olds[i] = t.old
	}
	ld := c.runManyHolding(ctx, it, ks, rs, len(ks), load, olds)
	stop()
	if len(ld.rebuilt) > 0 {
		// Changed while the batch waited for its permit: let go, as
		// stillStale lets go of a key that changed before.
		kept := held[:0]
		for _, t := range held {
			if ld.rebuilt[t.cl.k.value] {
				c.release(ctx, t.cl.k, t.cl.l)
				delete(loaded, t.cl.k.user)
				continue
			}
			kept = append(kept, t)
		}
		held = kept
	}
	if ld.err != nil {
		c.log(slog.LevelWarn, "background batch refresh failed; serving stale", "keys", len(ks), "err", ld.err)
	}
	wctx, cancel := writeContext(ctx)
	defer cancel()
	failpoint.Inject(wctx, failpoint.CacheRefreshLoaded)
	notes := make([]announcement, len(held))
	vals := make([]string, len(held))
	var ops []redisx.CondSet
	var at []int // the index in held of each of ops
	for i, t := range held {
		res, err := c.resultOf(t.cl.k, ld.got, ld.err)
		if a, done := c.endRefresh(wctx, t.cl, t.old, ld.it, res, err); done {
			notes[i] = a
			continue
		}
		val, ttl := c.entry(ld.it, res.payload, res.notFound, ld.took, ld.tags)
		vals[i] = val
		ops = append(ops, redisx.CondSet{Key: t.cl.k.value, Old: string(t.old), Next: val, TTL: ttl})
		at = append(at, i)
	}
	// The new values replace the stale ones together (one pipeline where
	// the server has SET IFEQ), each only if its key still holds what was
	// refreshed.
	if len(ops) > 0 {
		wrote, errs := c.conn.SetIfEqualMany(wctx, ops)
		failpoint.Inject(wctx, failpoint.CacheWritten)
		for j, i := range at {
			notes[i] = c.wroteNote(held[i].cl, vals[i], wrote[j], errs[j])
			notes[i].free = true
		}
	}
	c.announceAll(wctx, notes)
	return loaded
}

// staleLock is the rebuild lock cl, held to refresh the stale value old.
type staleLock struct {
	cl  heldClaim
	old []byte
}

// lockStale takes the rebuild locks of the keys of stale that no other
// process holds, together (lock.ObtainMany), and returns those it got.
func (c *Cache) lockStale(ctx context.Context, stale []staleKey) []staleLock {
	var ls []staleLock
	var names []string
	for _, s := range stale {
		if err := c.permitted(ctx, s.k, s.old); err != nil {
			c.serverError(s.k.user, err) // the stale value goes on being served
			continue
		}
		ls = append(ls, staleLock{cl: heldClaim{k: s.k}, old: s.old})
		names = append(names, s.k.lock())
	}
	if len(names) == 0 {
		return nil
	}
	tries, err := c.locks.ObtainMany(ctx, names, c.s.lockTTL)
	if err != nil {
		return nil // the refresh's context ended (Close)
	}
	held := ls[:0]
	for i, t := range tries {
		switch {
		case t.Err != nil:
			c.serverError(ls[i].cl.k.user, t.Err)
		case t.Lock == nil:
			c.n.contention.Add(1)
		default:
			ls[i].cl.l = t.Lock
			held = append(held, ls[i])
		}
	}
	return held
}

// stillStale releases the locks of held whose key no longer holds the
// stale value, and returns the others.
func (c *Cache) stillStale(ctx context.Context, held []staleLock) []staleLock {
	if len(held) == 0 {
		return nil
	}
	// As stillHolds: another process may have rebuilt a value between the
	// read and the lock.
	ks, olds := make([]keys, len(held)), make([][]byte, len(held))
	for i, t := range held {
		ks[i], olds[i] = t.cl.k, t.old
	}
	same := c.unchanged(ctx, ks, olds)
	kept := held[:0]
	for i, t := range held {
		if !same[i] {
			c.release(ctx, t.cl.k, t.cl.l)
			continue
		}
		kept = append(kept, t)
	}
	return kept
}

// unchanged reports, in one round trip, whether each of ks still holds
// the entry olds[i] (the rebuilds' check before their loads, as rebuilt is
// one key's); a failed read is no evidence of a change: all true.
func (c *Cache) unchanged(ctx context.Context, ks []keys, olds [][]byte) []bool {
	same := make([]bool, len(ks))
	reads, err := c.readMany(ctx, ks)
	for i := range ks {
		same[i] = err != nil || reads[i].found && bytes.Equal(reads[i].raw, olds[i])
	}
	return same
}

// endRefresh ends the refresh of old under the rebuild lock cl when res
// (or err) leaves nothing to write, as refreshStale and replaceOld do, and
// returns the announcement (done); otherwise the caller writes res.
func (c *Cache) endRefresh(ctx context.Context, cl heldClaim, old []byte, it itemSettings, res outcome, err error) (a announcement, done bool) {
	switch {
	case err != nil:
		// Nobody retries for Expiry.RefreshBackoff: the lock stays that long.
		if rerr := cl.l.Refresh(ctx, c.s.backoff); rerr != nil && !errors.Is(rerr, lock.ErrNotHeld) {
			c.serverError(cl.k.user, rerr)
		}
		return nothing(cl, err), true
	case res.notFound && it.negative == 0:
		c.endOld(ctx, cl.k, old) // the loader found nothing: end the old value
		a = nothing(cl, nil)
		a.free = true
		return a, true
	}
	return announcement{}, false
}

// parallel calls fn(0) … fn(n-1), at most writeFanout at a time, and
// returns when all have returned.
func parallel(n int, fn func(i int)) {
	if n == 1 {
		fn(0)
		return
	}
	sem := make(chan struct{}, writeFanout)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			fn(i)
		}()
	}
	wg.Wait()
}
