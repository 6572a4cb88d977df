package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hotkv/stampede/internal/flight"
	"github.com/hotkv/stampede/internal/lockx"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/lock"
)

// writeTimeout bounds the writes that follow a load; they run on a context
// of their own so that a load which used up LoadTimeout can still store
// its result.
const writeTimeout = 5 * time.Second

// GetOrLoad returns the value for key, loading it with load when it is
// missing, and makes sure that concurrent callers, in this process and in
// every other process sharing the server, cause one load between them:
//
//   - fresh value: returned after one GET, no lock traffic;
//   - stale value (past TTL, within StaleTTL): returned at once, and one
//     process in the cluster refreshes it in the background;
//   - no value: callers in this process share one flight; across processes
//     the one that claims the key loads, writes and announces, the others
//     wait for the announcement (polling as a safety net) and read the
//     value; a claim whose owner died expires after LockTTL and is taken
//     over.
//
// A loader error is returned to every caller waiting for that load, in
// every process, and is never stored; loader.ErrNotFound is stored for
// NegativeTTL, and when a refresh of a stale value meets it, that value is
// no longer served: it is deleted (or replaced by the negative entry), but
// only if nothing was written to the key since it was read. A panicking
// loader becomes a *loader.PanicError. If the server cannot be reached,
// the loader runs without it (fail open).
//
// A call that starts after a Delete or Set of key returned, in any
// process, never returns a value from before it: a caller that joins a
// flight of its process takes the flight's result only if it is at least
// as new as what the caller's own read of the key found, and otherwise
// reads the key again. (While failing open there is no such guarantee.)
//
// WARNING: concurrent callers share one load's result and its timeout: the
// load runs on a context detached from all callers (it keeps the first
// caller's values, not its cancellation) and limited by LoadTimeout. Each
// caller's own ctx only decides how long that caller waits.
func GetOrLoad[V any](ctx context.Context, c *Cache, key string, load loader.Func[V], opts ...Option) (V, error) {
	var zero V
	if err := c.check(key); err != nil {
		return zero, err
	}
	if load == nil {
		return zero, invalid("nil loader for key %q", key)
	}
	it, err := c.item(opts)
	if err != nil {
		return zero, err
	}
	k := c.keys(key)

	// A caller that joins a flight of this process may find that the
	// flight's result predates what its own read saw (see
	// outcome.accepts); it then reads the key again and goes round once
	// more. Only the first round counts in Stats.
	for round := 0; ; round++ {
		first := round == 0
		var bad []byte // a stored value this caller could not decode
		var obs observation
		if !c.down() {
			raw, err := c.rc.Get(ctx, k.value).Bytes()
			obs = observation{read: true, done: time.Now()}
			switch {
			case err == nil:
				e, st, derr := c.classify(raw)
				switch st {
				case stateFresh, stateStale:
					if e.NotFound && st == stateFresh {
						if first {
							c.n.hits.Add(1)
							c.emit(EventHit, key, 0, nil)
						}
						return zero, ErrNotFound
					}
					if e.NotFound {
						break // an expired negative entry: load again
					}
					if st == stateStale || c.early(e) {
						c.refresh(ctx, k, it, raw, encoded(c, key, load))
					}
					v, err := decode[V](c, key, e.Payload)
					if err != nil {
						bad = raw // e.g. another type under the key: rebuild it
						break
					}
					switch {
					case !first:
					case st == stateStale:
						c.n.staleHits.Add(1)
						c.emit(EventStale, key, 0, nil)
					default:
						c.n.hits.Add(1)
						c.emit(EventHit, key, 0, nil)
					}
					return v, nil
				case stateBuilding:
					info, _ := lockx.ParseValue(string(raw))
					obs.claim = info.Token
				case stateCorrupt:
					if first {
						c.n.decodeFailures.Add(1)
						c.emit(EventDecodeFailure, key, 0, derr)
					}
					bad = raw
				}
			case redisx.IsNil(err):
			case redisx.CallerDone(ctx):
				// The caller's own deadline or cancellation, not a server
				// failure: nobody else must fail open because of it.
				return zero, callerErr(ctx)
			default:
				c.serverError(key, err)
				obs = observation{}
			}
		}
		if first {
			c.n.misses.Add(1)
			c.emit(EventMiss, key, 0, nil)
		} else if round > 2 {
			// The key keeps changing under the flights this caller joins:
			// start one of its own (the others' flights go on).
			c.flights.Forget(k.value)
		}

		enc := encoded(c, key, load)
		res, err, shared := c.flights.Do(ctx, k.value, c.background(ctx, it.wait), func(ctx context.Context) (outcome, error) {
			return c.fill(ctx, k, it, enc, bad)
		})
		if shared && first {
			c.n.coalesced.Add(1)
		}
		if err != nil {
			return zero, err
		}
		if shared && !res.accepts(obs) {
			continue
		}
		if res.notFound {
			return zero, ErrNotFound
		}
		v, err := decode[V](c, key, res.payload)
		if err != nil {
			return zero, err
		}
		return v, nil
	}
}

// observation is what a caller's own read of the key found, for deciding
// whether it may take the result of a flight it joined.
type observation struct {
	read  bool      // the caller read the key (not while failing open)
	claim string    // the token of the rebuild claim it found, if any
	done  time.Time // when the read's reply arrived
}

// accepts reports whether a caller that read the key (obs) and then joined
// a flight started by another caller may take the flight's result o: when
// o is at least as new as what the caller read. That holds when o comes
// from the rebuild whose claim the caller found (a claim's token is never
// used twice, so the key did not change in between), and when the flight
// sent the read or claim that o rests on after the caller's read returned.
// Otherwise the flight may have learned o before a Delete or Set, made in
// any process, that the caller's read already saw (a rebuild that wrote
// just before a Delete, its announcement arriving after it): the caller
// must read the key again, or it would not read its own writes.
func (o outcome) accepts(obs observation) bool {
	switch {
	case !obs.read || o.seen.IsZero():
		return true // failing open: no server to compare with
	case obs.claim != "" && o.claim == obs.claim:
		return true
	}
	return o.seen.After(obs.done)
}

// encoded wraps load to return the codec's bytes, which is what flights
// share: each caller decodes its own copy.
func encoded[V any](c *Cache, key string, load loader.Func[V]) loader.Func[[]byte] {
	return func(ctx context.Context) ([]byte, error) {
		v, err := load(ctx)
		if err != nil {
			return nil, err
		}
		b, err := c.s.codec.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("cache: encode %q: %w", key, err)
		}
		return b, nil
	}
}

// fill gets a value for a key that had none usable: it claims the rebuild
// and loads, or waits for the process that claimed it. It runs once per
// key per process at a time, on a background context.
//
// bad is a stored value the caller found but could not decode: finding it
// again means replacing it, not returning it.
func (c *Cache) fill(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], bad []byte) (outcome, error) {
	var waitStart time.Time
	for {
		if c.down() {
			return c.loadAlone(ctx, k, load)
		}
		// Register before reading, so that an announcement sent between the
		// read and the wait is not missed.
		w := c.ann.register(k.value)
		v := c.step(ctx, k, it, load, bad)
		switch v.next {
		case answered:
			c.ann.unregister(k.value, w)
			return v.res, v.err
		case readAgain:
			c.ann.unregister(k.value, w)
			continue
		}
		if waitStart.IsZero() {
			waitStart = time.Now()
			c.n.waits.Add(1)
		}
		left := it.wait - time.Since(waitStart)
		if left <= 0 {
			c.ann.unregister(k.value, w)
			c.n.waitTimeouts.Add(1)
			c.emit(EventWait, k.user, time.Since(waitStart), ErrWaitTimeout)
			if c.s.loadOnWaitTimeout {
				started := time.Now()
				res, err := c.run(ctx, k, load)
				res.claim, res.seen = v.claim, started
				return res, err
			}
			return outcome{}, fmt.Errorf("%w (key %q, waited %v)", ErrWaitTimeout, k.user, it.wait)
		}
		n, err := c.await(ctx, w, min(left, c.s.poll))
		c.ann.unregister(k.value, w)
		if err != nil {
			return outcome{}, fmt.Errorf("cache: load %q: %w", k.user, err)
		}
		if v.claim == "" || n.token != v.claim {
			// A poll, a Set, or news of a rebuild this caller did not see
			// claim the key (it may predate a Delete): read the key again.
			continue
		}
		switch n.kind {
		case noticeValue:
			if n.text == "" {
				continue
			}
			if e, st, err := c.classify([]byte(n.text)); err == nil && st != stateBuilding {
				c.emit(EventWait, k.user, time.Since(waitStart), nil)
				return outcome{payload: e.Payload, notFound: e.NotFound, claim: v.claim, seen: v.seen}, nil
			}
		case noticeNotFound:
			c.emit(EventWait, k.user, time.Since(waitStart), nil)
			return outcome{notFound: true, claim: v.claim, seen: v.seen}, nil
		case noticeError:
			err := fmt.Errorf("%w: key %q: %s", ErrRemoteLoad, k.user, n.text)
			if strings.Contains(n.text, ErrPermission.Error()) {
				// The rebuild's write was refused by the ACL: so would
				// this caller's be; tell it so.
				err = remotePermission{err}
			}
			c.emit(EventWait, k.user, time.Since(waitStart), err)
			return outcome{}, err
		}
	}
}

// step reads the key once and decides what fill does next: answer with
// what it found (or loaded, having claimed the key), read again, or wait
// for another process's rebuild.
func (c *Cache) step(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], bad []byte) verdict {
	sent := time.Now() // outcome.seen of what this read finds
	raw, err := c.rc.Get(ctx, k.value).Bytes()
	switch {
	case redisx.IsNil(err):
		// Nothing there: claim the key itself. The claim is a lock whose
		// value sits where the entry goes, so a Delete or Set during the
		// load removes it and the load's write (conditional on the claim)
		// becomes a no-op. No claim is taken that could not be written or
		// released (an ACL refusing the scripts that needs).
		if err := c.permitted(ctx, k, nil); err != nil {
			return c.serverFailed(ctx, k, load, err)
		}
		claimed := time.Now()
		l, err := c.locks.Obtain(ctx, k.value, c.s.lockTTL, nil)
		switch {
		case errors.Is(err, lock.ErrNotObtained):
			c.n.contention.Add(1)
			return verdict{next: readAgain}
		case err != nil:
			return c.serverFailed(ctx, k, load, err)
		}
		res, err := c.rebuild(ctx, k, it, load, l, nil, false)
		res.claim, res.seen = l.Token(), claimed
		return answer(res, err)
	case err != nil:
		return c.serverFailed(ctx, k, load, err)
	}
	e, st, _ := c.classify(raw)
	switch {
	case st == stateBuilding:
		info, _ := lockx.ParseValue(string(raw))
		return waitFor(info.Token, sent)
	case st == stateFresh && e.NotFound:
		return answer(outcome{notFound: true, seen: sent}, nil)
	case (st == stateFresh || st == stateStale) && !e.NotFound && (bad == nil || !bytes.Equal(raw, bad)):
		if st == stateStale {
			c.refresh(ctx, k, it, raw, load)
		}
		return answer(outcome{payload: e.Payload, seen: sent}, nil)
	}
	// Undecodable, an expired negative entry, or a value the caller could
	// not decode: replace it under the separate rebuild lock.
	if err := c.permitted(ctx, k, raw); err != nil {
		return c.serverFailed(ctx, k, load, err)
	}
	l, err := c.locks.Obtain(ctx, k.lock(), c.s.lockTTL, nil)
	switch {
	case errors.Is(err, lock.ErrNotObtained):
		c.n.contention.Add(1)
		return waitFor("", time.Time{})
	case err != nil:
		return c.serverFailed(ctx, k, load, err)
	}
	res, err := c.rebuild(ctx, k, it, load, l, raw, false)
	if err == errRetry {
		return verdict{next: readAgain}
	}
	res.seen = sent
	return answer(res, err)
}

// errRetry is rebuild's signal that the key changed before the load began:
// read it again.
var errRetry = errors.New("cache: key changed; read again")

// serverFailed decides what a failed server call during fill means for the
// caller: its own cancellation or deadline ends its call; a refusal (an
// error reply, an ACL) is its answer, since failing open would load on
// every call; anything else is a failed server, and the loader runs
// without it (fail open).
func (c *Cache) serverFailed(ctx context.Context, k keys, load loader.Func[[]byte], err error) verdict {
	if redisx.CallerDone(ctx) {
		return answer(outcome{}, fmt.Errorf("cache: load %q: %w", k.user, callerErr(ctx)))
	}
	c.serverError(k.user, err)
	if redisx.IsNoPerm(err) && !errors.Is(err, ErrPermission) {
		err = redisx.Denied("server call", err, "")
	}
	if redisx.IsReply(err) || errors.Is(err, ErrPermission) {
		return answer(outcome{}, fmt.Errorf("cache: %q: %w", k.user, err))
	}
	return answer(c.loadAlone(ctx, k, load))
}

// await waits for a notice for w, at most d.
func (c *Cache) await(ctx context.Context, w *waiter, d time.Duration) (notice, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case n := <-w.ch:
		return n, nil
	case <-t.C:
		return notice{}, nil // poll: read again
	case <-ctx.Done():
		return notice{}, ctx.Err()
	}
}

// run calls the loader once, limited by LoadTimeout, counting it.
func (c *Cache) run(ctx context.Context, k keys, load loader.Func[[]byte]) (outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, c.s.loadTimeout)
	defer cancel()
	start := time.Now()
	c.n.loads.Add(1)
	payload, err := flight.Call(ctx, load)
	c.emit(EventLoad, k.user, time.Since(start), err)
	switch {
	case errors.Is(err, loader.ErrNotFound):
		return outcome{notFound: true}, nil
	case err != nil:
		c.n.loadErrors.Add(1)
		return outcome{}, fmt.Errorf("cache: load %q: %w", k.user, err)
	}
	return outcome{payload: payload}, nil
}

// loadAlone runs the loader without the server (fail open).
func (c *Cache) loadAlone(ctx context.Context, k keys, load loader.Func[[]byte]) (outcome, error) {
	c.n.failOpen.Add(1)
	c.emit(EventFailOpen, k.user, 0, nil)
	return c.run(ctx, k, load)
}

// rebuild runs the loader while holding l, writes the result if nobody
// changed the key meanwhile, and announces the outcome. With old == nil, l
// is a claim on the value key itself and the write replaces it; otherwise
// l is the separate rebuild lock and the write is conditional on the key
// still holding old (by digest when old is large). In the background (a
// stale refresh) a failure keeps l for RefreshBackoff so that nobody
// retries at once, and the stale value goes on being served; a not-found
// (without NegativeTTL) deletes old if the key still holds it.
func (c *Cache) rebuild(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], l *lock.Lock, old []byte, background bool) (outcome, error) {
	if old != nil {
		// Between our read and our lock, another process may have rebuilt
		// the value and released the lock: then there is nothing to do.
		cur, err := c.rc.Get(ctx, k.value).Bytes()
		if err == nil && !bytes.Equal(cur, old) || redisx.IsNil(err) {
			if err := l.Release(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) {
				c.serverError(k.user, err)
			}
			if background {
				return outcome{}, nil
			}
			return outcome{}, errRetry
		}
	}
	if background {
		c.n.refreshes.Add(1)
		c.emit(EventRefresh, k.user, 0, nil)
	}
	_, stop := l.KeepAlive(ctx, c.s.lockTTL, 0)
	start := time.Now()
	exp := &expiry{}
	res, err := c.run(context.WithValue(ctx, expiryKey{}, exp), k, load)
	loadTime := time.Since(start)
	if exp.set {
		it.ttl, it.stale = exp.fresh, exp.stale
	}
	_ = stop() // a lost claim is seen by the conditional write below

	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
	defer cancel()
	if err == nil && !res.notFound && len(res.payload) > c.s.maxSize {
		err = fmt.Errorf("%w: %q is %d bytes, MaxValueSize is %d", ErrValueTooLarge, k.user, len(res.payload), c.s.maxSize)
	}
	if err != nil || (res.notFound && it.negative == 0) {
		// Nothing to store. Free the claim (or, after a failed background
		// refresh, hold the lock a little) and tell the waiters.
		var ferr error
		if background && err != nil {
			ferr = l.Refresh(wctx, c.s.backoff)
			c.log(slog.LevelWarn, "background refresh failed; serving stale", "key", k.user, "err", err)
		} else {
			if err == nil && old != nil {
				// The loader found nothing where old (a stale value, or one
				// nobody could use) is stored: end it, or it would be served
				// and refreshed again and again. Conditional, as every
				// write: a Delete or Set since our read stands.
				c.endOld(wctx, k, old)
			}
			ferr = l.Release(wctx)
		}
		if ferr != nil && !errors.Is(ferr, lock.ErrNotHeld) {
			c.serverError(k.user, ferr)
		}
		if err != nil {
			c.announce(wctx, k, l, noticeError, err.Error())
		} else {
			c.announce(wctx, k, l, noticeNotFound, "")
		}
		return res, err
	}

	val, ttl := c.entry(it, res.payload, res.notFound, loadTime)
	var wrote bool
	var werr error
	if old == nil {
		werr = lockx.Replace(wctx, l, val, ttl)
		wrote = werr == nil
		if errors.Is(werr, lock.ErrNotHeld) {
			werr = nil
		}
	} else {
		wrote, werr = c.conn.SetIfEqual(wctx, k.value, string(old), val, ttl)
		if rerr := l.Release(wctx); rerr != nil && !errors.Is(rerr, lock.ErrNotHeld) && werr == nil {
			werr = rerr
		}
	}
	switch {
	case werr != nil:
		c.serverError(k.user, werr)
	case !wrote:
		c.n.writesSkipped.Add(1)
		c.emit(EventWriteSkipped, k.user, 0, nil)
	}
	if errors.Is(werr, ErrPermission) || redisx.IsNoPerm(werr) {
		// The waiters' writes would be refused too: tell them at once
		// rather than let them wait for a value that will not come.
		// The claim goes if the server lets it (it does not where the
		// refused write was a script, and the release is one too).
		if old == nil {
			_ = l.Release(wctx)
		}
		c.announce(wctx, k, l, noticeError, werr.Error())
		return res, nil
	}
	inline := ""
	if wrote && len(val) <= inlineMax {
		inline = val
	}
	c.announce(wctx, k, l, noticeValue, inline)
	return res, nil
}

// endOld deletes the value key if it still holds old.
func (c *Cache) endOld(ctx context.Context, k keys, old []byte) {
	deleted, err := c.conn.DeleteIfEqual(ctx, k.value, string(old))
	switch {
	case err != nil:
		c.serverError(k.user, err)
	case !deleted:
		c.n.writesSkipped.Add(1)
		c.emit(EventWriteSkipped, k.user, 0, nil)
	}
}

func (c *Cache) announce(ctx context.Context, k keys, l *lock.Lock, kind byte, text string) {
	if c.down() {
		// The write just failed on the connection, or another call's did:
		// do not pay a second timeout; the waiters' poll finds the result.
		return
	}
	err := c.rc.Publish(ctx, c.ann.channel, message(kind, k.value, l.Token(), text)).Err()
	switch {
	case redisx.IsNoPerm(err):
		c.ann.refused("PUBLISH", err) // counted and logged there, not as a failed server
	case err != nil:
		c.serverError(k.user, err)
	default:
		c.ann.worked("PUBLISH")
	}
}

// refresh starts a background refresh of a stale (or nearly expired)
// value unless this process already runs one for the key. Across
// processes the rebuild lock lets one through; the others keep serving
// what they have.
func (c *Cache) refresh(ctx context.Context, k keys, it itemSettings, old []byte, load loader.Func[[]byte]) {
	if c.refreshes.Joined(k.value) > 0 {
		return
	}
	old = append([]byte(nil), old...)
	c.refreshes.Start(k.value, c.background(ctx, it.wait), func(ctx context.Context) (struct{}, error) {
		if err := c.permitted(ctx, k, old); err != nil {
			c.serverError(k.user, err) // the stale value goes on being served
			return struct{}{}, nil
		}
		l, err := c.locks.Obtain(ctx, k.lock(), c.s.lockTTL, nil)
		switch {
		case errors.Is(err, lock.ErrNotObtained):
			c.n.contention.Add(1)
			return struct{}{}, nil
		case err != nil:
			c.serverError(k.user, err)
			return struct{}{}, nil
		}
		_, _ = c.rebuild(ctx, k, it, load, l, old, true)
		return struct{}{}, nil
	})
}
