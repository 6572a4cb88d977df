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

	"github.com/hotkv/stampede/internal/flight"
	"github.com/hotkv/stampede/internal/lockvalue"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/loader"
)

// GetOrLoadMany's loads. A batch is the missing keys one call leads (it
// started their flights in this process): it claims them in one pipeline,
// calls the loader once for the keys it claimed, writes each value in
// place of its claim, and announces them in one pipeline. The claim is the
// one claimMiss takes (a lock value of package lock, SET NX PX on the
// value key, no fencing), and every write after the load is the same
// conditional operation package lock makes on it (redisx.Conn's
// SetIfEqual, ExpireIfEqual, DeleteIfEqual): a Delete or Set during the
// load removes the claim, and the write becomes a no-op. Keys whose claim
// another process took continue as GetOrLoad's fill (they wait for it).
//
// The stale values a call served are refreshed the same way, under the
// rebuild locks (stale.go), by refreshBatch.

// writeFanout bounds the conditional writes of a batch in flight at once.
const writeFanout = 16

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
				return c.fill(ctx, k, b.it, single, nil, foundUnknown)
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

// heldClaim is a claim the batch took: the value key holds value.
type heldClaim struct {
	k     keys
	key   string // the claimed server key
	value string
	token string
}

// run claims the batch's keys, loads those it claimed in one loader call,
// and ends each claim with its result.
func (b *batch) run(ctx context.Context) {
	if b.down {
		b.loadAlone(ctx, b.order)
		return
	}
	claimed := time.Now() // outcome.seen of what the loads rest on
	won, alone := b.claim(ctx, claimed)
	if len(won) == 0 && len(alone) == 0 {
		return
	}
	b.loadClaimed(ctx, won, alone, claimed)
}

// claim claims the batch's keys in one pipeline (claims dated claimed). It
// returns the claims it took (won) and the keys the server failed for
// (alone: loaded without it), and sends every other key its result: wait
// for what another process stored, or go on as fill.
func (b *batch) claim(ctx context.Context, claimed time.Time) (won []heldClaim, alone []keys) {
	c := b.c
	pipe := c.rc.Pipeline()
	type try struct {
		cl  heldClaim
		cmd *redis.Cmd
	}
	tries := make([]try, 0, len(b.order))
	for _, k := range b.order {
		if err := c.permitted(ctx, k, nil); err != nil {
			b.send(k, batchResult{fill: true}) // fill reports it, as for GetOrLoad
			continue
		}
		token := lockvalue.NewToken()
		value := lockvalue.Encode(token, claimed, "")
		// SET NX (the claim) with GET: where another process was first,
		// the reply is what it stored, its claim or its value, so that
		// this one need not read the key again.
		cmd := pipe.Do(ctx, "SET", k.value, value, "PX", max(c.s.lockTTL.Milliseconds(), 1), "NX", "GET")
		tries = append(tries, try{heldClaim{k: k, key: k.value, value: value, token: token}, cmd})
	}
	if len(tries) == 0 {
		return nil, nil
	}
	_ = redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
	for _, t := range tries {
		old, err := t.cmd.Text()
		switch {
		case redisx.IsNil(err): // nothing was there: claimed
			won = append(won, t.cl)
		case err == nil:
			// Another process was first: wait for its claim, or take
			// what it stored.
			c.n.contention.Add(1)
			b.send(t.cl.k, c.foundInstead(t.cl.k, old, claimed))
		case ctx.Err() != nil:
			b.send(t.cl.k, batchResult{err: fmt.Errorf("cache: load %q: %w", t.cl.k.user, ErrClosed)})
		case redisx.IsReply(err):
			// A refusal: fill meets it again and answers as GetOrLoad does.
			b.send(t.cl.k, batchResult{fill: true})
		default:
			c.serverError(t.cl.k.user, err)
			alone = append(alone, t.cl.k)
		}
	}
	return won, alone
}

// loadClaimed calls the loader once for the keys of the claims won and
// the keys alone (the server failed for them: fail open), keeping the
// claims alive meanwhile, and sends each key its result: alone at once,
// won once its value replaced its claim (writeBack).
func (b *batch) loadClaimed(ctx context.Context, won []heldClaim, alone []keys, claimed time.Time) {
	c := b.c
	users := make([]string, 0, len(won)+len(alone))
	for _, cl := range won {
		users = append(users, cl.k.user)
	}
	for _, k := range alone {
		c.emit(ctx, EventFailOpen, k.user, 0, nil)
		users = append(users, k.user)
	}
	stop := c.keepClaims(ctx, won)
	var ld loadedMany
	ld.got, ld.it, ld.took, ld.err = c.runMany(ctx, b.it, users, b.load)
	stop()
	for _, k := range alone {
		res, err := c.resultOf(k, ld.got, ld.err)
		b.send(k, batchResult{res: res, err: err})
	}
	results := c.writeBack(ctx, won, ld, claimed)
	for i, cl := range won {
		b.send(cl.k, results[i])
	}
}

// loadedMany is what one call of a batch loader returned (runMany).
type loadedMany struct {
	got  map[string]encodedValue
	it   itemSettings // with the TTLs the loader set through Expire
	took time.Duration
	err  error
}

// writeBack replaces each claim of won (taken at claimed) with its entry
// from ld, or ends it where there is nothing to store, announces the
// outcomes, and returns the result of each claim's key.
func (c *Cache) writeBack(ctx context.Context, won []heldClaim, ld loadedMany, claimed time.Time) []batchResult {
	wctx, cancel := writeContext(ctx)
	defer cancel()
	notes := make([]announcement, len(won))
	results := make([]batchResult, len(won))
	// The values replace their claims in one pipeline where the server
	// has SET IFEQ; what is left ends one claim at a time (endClaim).
	var ws []claimWrite
	var rest []int
	for i, cl := range won {
		res, err := c.resultOf(cl.k, ld.got, ld.err)
		res.claim, res.seen = cl.token, claimed
		results[i] = batchResult{res: res, err: err}
		if err != nil || res.notFound && ld.it.negative == 0 {
			rest = append(rest, i)
			continue
		}
		val, ttl := c.entry(ld.it, res.payload, res.notFound, ld.took)
		ws = append(ws, claimWrite{i: i, cl: cl, val: val, ttl: ttl})
	}
	rest = append(rest, c.writeClaims(wctx, ws, notes)...)
	parallel(len(rest), func(j int) {
		i := rest[j]
		notes[i] = c.endClaim(wctx, won[i], ld.it, ld.took, results[i].res, results[i].err)
	})
	c.announceAll(wctx, notes)
	return results
}

// foundInstead is what a key's flight does with old, found stored where
// the batch tried to claim the key by a read sent at sent: wait for the
// claim of another process, take a fresh value or not-found, and
// otherwise go the way of GetOrLoad (fill).
func (c *Cache) foundInstead(k keys, old string, sent time.Time) batchResult {
	rd := c.decide([]byte(old), c.s.now())
	switch {
	case rd.use == useWait:
		return batchResult{claim: rd.claim, seen: sent}
	case (rd.use == useValue || rd.use == useNotFound) && !rd.stale:
		return batchResult{res: outcome{payload: rd.e.Payload, notFound: rd.e.NotFound, seen: sent}}
	}
	return batchResult{fill: true}
}

// loadAlone loads ks in one loader call without the server (fail open):
// nothing is stored.
func (b *batch) loadAlone(ctx context.Context, ks []keys) {
	c := b.c
	users := make([]string, len(ks))
	for i, k := range ks {
		c.emit(ctx, EventFailOpen, k.user, 0, nil)
		users[i] = k.user
	}
	got, _, _, lerr := c.runMany(ctx, b.it, users, b.load)
	for _, k := range ks {
		res, err := c.resultOf(k, got, lerr)
		b.send(k, batchResult{res: res, err: err})
	}
}

// resultOf is k's outcome of a batch load that returned got and lerr.
func (c *Cache) resultOf(k keys, got map[string]encodedValue, lerr error) (outcome, error) {
	if lerr != nil {
		return outcome{}, lerr
	}
	ev, ok := got[k.user]
	switch {
	case !ok:
		return outcome{notFound: true}, nil
	case ev.err != nil:
		return outcome{}, ev.err
	case len(ev.payload) > c.s.maxSize:
		return outcome{}, fmt.Errorf("%w: %q is %d bytes, MaxValueSize is %d", ErrValueTooLarge, k.user, len(ev.payload), c.s.maxSize)
	}
	return outcome{payload: ev.payload}, nil
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
		it.ttl, it.stale = exp.fresh, exp.stale
	}
	switch {
	case errors.Is(err, loader.ErrNotFound):
		return nil, it, took, nil // none of them: every key is missing from the map
	case err != nil: // counted in LoadErrors by emit
		return nil, it, took, fmt.Errorf("cache: load %d keys: %w", len(users), err)
	}
	return got, it, took, nil
}

// claimWrite is the entry val (expiring after ttl) to replace the claim
// cl, the i-th of a batch.
type claimWrite struct {
	i   int
	cl  heldClaim
	val string
	ttl time.Duration
}

// writeClaims replaces claims with their entries in one pipeline of SET
// … IFEQ claim, where the server has it (what redisx.Conn.SetIfEqual
// sends there for one), and sets the announcement of each in notes. It
// returns the indexes (claimWrite.i) it did not write: the server has no
// SET IFEQ, or refused it; endClaim writes those one at a time.
func (c *Cache) writeClaims(ctx context.Context, ws []claimWrite, notes []announcement) (left []int) {
	if len(ws) == 0 {
		return nil
	}
	caps, err := c.conn.CapabilitiesFor(ctx, ws[0].cl.key)
	if err != nil || caps.Extend != redisx.ExtendSetIfEq || len(ws[0].cl.value) > c.s.digest {
		for _, w := range ws {
			left = append(left, w.i)
		}
		return left
	}
	pipe := c.rc.Pipeline()
	cmds := make([]*redis.Cmd, len(ws))
	for j, w := range ws {
		cmds[j] = pipe.Do(ctx, "SET", w.cl.key, w.val, "IFEQ", w.cl.value, "PX", max(w.ttl.Milliseconds(), 1))
	}
	_ = redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
	for j, w := range ws {
		err := cmds[j].Err()
		switch {
		case redisx.IsRefused(err):
			left = append(left, w.i) // SetIfEqual downgrades and uses the script
			continue
		case redisx.IsNil(err):
			c.noteWrite(w.cl.k, false, nil)
		case err != nil:
			err = redisx.Denied("conditional write", err, "")
			c.noteWrite(w.cl.k, false, err)
			if refused(err) {
				notes[w.i] = announcement{k: w.cl.k, token: w.cl.token, kind: noticeError, text: err.Error(), free: &w.cl}
				continue
			}
		}
		notes[w.i] = written(w.cl, err == nil, w.val)
	}
	return left
}

// endClaim replaces the claim cl with the entry for res, as loadClaimed
// does, and returns the announcement of the outcome; where there is
// nothing to store, the announcement frees the claim once it is published.
func (c *Cache) endClaim(ctx context.Context, cl heldClaim, it itemSettings, took time.Duration, res outcome, err error) announcement {
	if err != nil || res.notFound && it.negative == 0 {
		a := nothing(cl, err)
		a.free = &cl
		return a
	}
	val, ttl := c.entry(it, res.payload, res.notFound, took)
	wrote, werr := c.conn.SetIfEqual(ctx, cl.key, cl.value, val, ttl)
	c.noteWrite(cl.k, wrote, werr)
	if refused(werr) {
		return announcement{k: cl.k, token: cl.token, kind: noticeError, text: werr.Error(), free: &cl}
	}
	return written(cl, wrote, val)
}

func (c *Cache) releaseClaim(ctx context.Context, cl heldClaim) {
	if _, err := c.conn.DeleteIfEqual(ctx, cl.key, cl.value); err != nil {
		c.serverError(cl.k.user, err)
	}
}

// keepClaims keeps the claims cl alive, as lock.KeepAlive does for one,
// with one refresh of each every LockTTL/3, until stop is called.
func (c *Cache) keepClaims(ctx context.Context, cl []heldClaim) (stop func()) {
	if len(cl) == 0 {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(max(c.s.lockTTL/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			parallel(len(cl), func(i int) {
				// A lost claim is seen by the conditional write that follows.
				if _, err := c.conn.ExpireIfEqual(ctx, cl[i].key, cl[i].value, c.s.lockTTL); err != nil && ctx.Err() == nil {
					c.serverError(cl[i].k.user, err)
				}
			})
		}
	}()
	return func() { close(quit); <-done }
}

// announcement is one rebuild's outcome, to publish (see announce).
type announcement struct {
	k     keys
	token string
	kind  byte
	text  string
	free  *heldClaim // a claim to release once the outcome is published (see loadClaimed)
}

func nothing(cl heldClaim, err error) announcement {
	if err != nil {
		return announcement{k: cl.k, token: cl.token, kind: noticeError, text: err.Error()}
	}
	return announcement{k: cl.k, token: cl.token, kind: noticeNotFound}
}

func written(cl heldClaim, wrote bool, val string) announcement {
	a := announcement{k: cl.k, token: cl.token, kind: noticeValue}
	if wrote && len(val) <= inlineMax {
		a.text = val
	}
	return a
}

// announceAll publishes notes in one pipeline, as announce does one by
// one, then frees the claims the notes name.
func (c *Cache) announceAll(ctx context.Context, notes []announcement) {
	for _, a := range notes {
		c.nearDrop(a.k) // this process wrote, or found the key changed
	}
	defer func() {
		for _, a := range notes {
			if a.free != nil {
				c.releaseClaim(ctx, *a.free)
			}
		}
	}()
	if c.down() || len(notes) == 0 {
		return
	}
	pipe := c.rc.Pipeline()
	cmds := make([]*redis.IntCmd, len(notes))
	for i, a := range notes {
		cmds[i] = c.ann.publish(ctx, pipe, a.k.value, message(a.kind, a.k.value, a.token, a.text))
	}
	_ = redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			if !c.ann.published(err) {
				c.serverError(notes[i].k.user, err)
			}
			return
		}
	}
	c.ann.published(nil)
}

// refreshMany starts one background refresh of the stale values stale,
// leaving out the keys this process refreshes already; the refreshes
// group holds each key meanwhile, so that GetOrLoad does not start a
// second one.
func (c *Cache) refreshMany(ctx context.Context, it itemSettings, stale []staleKey, load manyLoader) {
	done := make(chan struct{})
	var mine []staleKey
	for _, s := range stale {
		if c.refreshes.Joined(s.k.value) > 0 {
			continue
		}
		started := c.refreshes.Start(s.k.value, c.background(ctx, it.wait), func(ctx context.Context) (struct{}, error) {
			select {
			case <-done:
			case <-ctx.Done():
			}
			return struct{}{}, nil
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
		c.refreshBatch(rctx, it, mine, load)
	}()
}

// refreshBatch replaces the stale values of stale whose rebuild lock this
// process gets, with one loader call, as refreshStale does for one.
// Nothing it meets is anyone's error.
func (c *Cache) refreshBatch(ctx context.Context, it itemSettings, stale []staleKey, load manyLoader) {
	held := c.stillStale(ctx, c.lockStale(ctx, stale))
	if len(held) == 0 {
		return
	}
	users := make([]string, len(held))
	locks := make([]heldClaim, len(held))
	for i, t := range held {
		users[i], locks[i] = t.cl.k.user, t.cl
		c.emit(ctx, EventRefresh, t.cl.k.user, 0, nil)
	}
	stop := c.keepClaims(ctx, locks)
	got, it, took, lerr := c.runMany(ctx, it, users, load)
	stop()
	if lerr != nil {
		c.log(slog.LevelWarn, "background batch refresh failed; serving stale", "keys", len(users), "err", lerr)
	}
	wctx, cancel := writeContext(ctx)
	defer cancel()
	notes := make([]announcement, len(held))
	parallel(len(held), func(i int) {
		t := held[i]
		res, err := c.resultOf(t.cl.k, got, lerr)
		notes[i] = c.endRefresh(wctx, t.cl, t.old, it, took, res, err)
	})
	c.announceAll(wctx, notes)
}

// staleLock is the rebuild lock cl, held to refresh the stale value old.
type staleLock struct {
	cl  heldClaim
	old []byte
}

// lockStale takes, in one pipeline, the rebuild locks of the keys of stale
// that no other process holds, and returns those it got.
func (c *Cache) lockStale(ctx context.Context, stale []staleKey) []staleLock {
	now := time.Now()
	pipe := c.rc.Pipeline()
	type try struct {
		staleLock
		cmd *redis.BoolCmd
	}
	tries := make([]try, 0, len(stale))
	for _, s := range stale {
		if err := c.permitted(ctx, s.k, s.old); err != nil {
			c.serverError(s.k.user, err) // the stale value goes on being served
			continue
		}
		token := lockvalue.NewToken()
		value := lockvalue.Encode(token, now, "")
		cl := heldClaim{k: s.k, key: s.k.lock(), value: value, token: token}
		tries = append(tries, try{staleLock{cl, s.old}, pipe.SetNX(ctx, cl.key, value, c.s.lockTTL)})
	}
	if len(tries) == 0 {
		return nil
	}
	_ = redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
	var held []staleLock
	for _, t := range tries {
		ok, err := t.cmd.Result()
		switch {
		case err != nil:
			c.serverError(t.cl.k.user, err)
		case !ok:
			c.n.contention.Add(1)
		default:
			held = append(held, t.staleLock)
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
	// read and the lock; a failed read is no evidence of a change.
	ks := make([]keys, len(held))
	for i, t := range held {
		ks[i] = t.cl.k
	}
	rs, err := c.readMany(ctx, ks)
	if err != nil {
		return held
	}
	kept := held[:0]
	for i, t := range held {
		if !rs[i].found || !bytes.Equal(rs[i].raw, t.old) {
			c.releaseClaim(ctx, t.cl)
			continue
		}
		kept = append(kept, t)
	}
	return kept
}

// endRefresh ends the refresh of old under the rebuild lock cl with res,
// as refreshStale and replaceOld do, and returns the announcement.
func (c *Cache) endRefresh(ctx context.Context, cl heldClaim, old []byte, it itemSettings, took time.Duration, res outcome, err error) announcement {
	k := cl.k
	switch {
	case err != nil:
		// Nobody retries for Expiry.RefreshBackoff: the lock stays that long.
		if _, rerr := c.conn.ExpireIfEqual(ctx, cl.key, cl.value, c.s.backoff); rerr != nil {
			c.serverError(k.user, rerr)
		}
		return nothing(cl, err)
	case res.notFound && it.negative == 0:
		c.endOld(ctx, k, old) // the loader found nothing: end the old value
		c.releaseClaim(ctx, cl)
		return nothing(cl, nil)
	}
	val, ttl := c.entry(it, res.payload, res.notFound, took)
	wrote, werr := c.conn.SetIfEqual(ctx, k.value, string(old), val, ttl)
	if _, rerr := c.conn.DeleteIfEqual(ctx, cl.key, cl.value); rerr != nil && werr == nil {
		werr = rerr
	}
	c.noteWrite(k, wrote, werr)
	if refused(werr) {
		return announcement{k: k, token: cl.token, kind: noticeError, text: werr.Error()}
	}
	return written(cl, wrote, val)
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
