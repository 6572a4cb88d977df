package cache

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/hotkv/stampede/internal/failpoint"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/lock"
)

// The stale path: something is stored under the key and must be replaced
// while it stays there: a stale value (refreshed in the background while
// it goes on being served), an expired negative entry, or a value nobody
// can use (undecodable, or of another type than the caller's).
//
// The rebuild holds the separate rebuild lock (k.lock()), not a claim on
// the value key, and every write is conditional on the key still holding
// the value read (compared by digest when it is large): a Delete or Set
// made since that read stands, and the rebuild's write is skipped.

// replaceUnusable decides what a caller does with a stored value it cannot
// return (old): it takes the rebuild lock, loads and replaces old (the
// verdict is the load's outcome); or, when another process holds the lock,
// waits for that rebuild's outcome (its lock's token is the claim the
// waiter matches announcements with, as on a miss); or, when the key
// changed before the load began, reads it again. sent is when the read
// that found old was sent.
func (c *Cache) replaceUnusable(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], old []byte, sent time.Time) verdict {
	if err := c.permitted(ctx, k, old); err != nil {
		return c.serverFailed(ctx, k, load, err)
	}
	l, holder, err := c.claim(ctx, k.lock())
	switch {
	case err != nil:
		return c.serverFailed(ctx, k, load, err)
	case l == nil:
		// Another process rebuilds it: wait for the outcome announced
		// under its lock's token, which is this caller's answer too.
		return waitForReplace(holder, sent)
	}
	if !c.stillHolds(ctx, k, l, old) {
		return verdict{next: readAgain}
	}
	failpoint.Inject(ctx, failpoint.CacheClaimed)
	ld := c.loadHolding(ctx, k, it, load, l, old)
	if errors.Is(ld.err, errRebuilt) {
		return verdict{next: readAgain} // l is freed
	}
	wctx, cancel := writeContext(ctx)
	defer cancel()
	failpoint.Inject(wctx, failpoint.CacheLoaded)
	c.replaceOld(wctx, k, l, old, ld)
	ld.res.seen = sent
	return answer(ld.res, ld.err)
}

// refresh starts a background refresh of a stale (or nearly expired)
// value unless this process already runs one for the key (a Batcher's
// call hands it to the Batcher's rounds); the caller, served that value,
// counts as one of the refresh's readers either way (Event.Callers).
// Across processes the rebuild lock lets one through; the others keep
// serving what they have.
func (c *Cache) refresh(ctx context.Context, k keys, it itemSettings, old []byte, load loader.Func[[]byte]) {
	if it.queue != nil { // a Batcher's call: its round loads the key (refreshqueue.go)
		it.queue.add(ctx, staleKey{k: k, old: old}, it)
		return
	}
	if c.refreshes.Attach(k.value) {
		return
	}
	old = append([]byte(nil), old...)
	c.refreshes.Start(k.value, c.background(ctx, it.wait), func(ctx context.Context) (string, error) {
		return c.refreshStale(ctx, k, it, load, old)
	})
}

// refreshStale replaces old, a value callers go on being served meanwhile,
// if this process gets the rebuild lock. Nothing it meets is anyone's
// error: a failure is logged and counted, and a failed load keeps the
// lock for Expiry.RefreshBackoff so that nobody retries at once. When the
// loader ran, it returns the caller's key and the load's error, for the
// refresh's EventServed (refreshServed); otherwise "" and nil.
func (c *Cache) refreshStale(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], old []byte) (string, error) {
	if err := c.permitted(ctx, k, old); err != nil {
		c.serverError(k.user, err) // the stale value goes on being served
		return "", nil
	}
	l, err := c.locks.Obtain(ctx, k.lock(), c.s.lockTTL)
	switch {
	case errors.Is(err, lock.ErrNotObtained):
		c.n.contention.Add(1)
		return "", nil
	case err != nil:
		c.serverError(k.user, err)
		return "", nil
	}
	if !c.stillHolds(ctx, k, l, old) {
		return "", nil
	}
	// A load of the key in progress in this process (a fail-open one,
	// which began while the server failed) is not run beside: the stale
	// value goes on being served, and a later read refreshes it.
	r := c.runs.begin(k.value, true)
	if r == nil {
		c.release(ctx, k, l)
		return "", nil
	}
	failpoint.Inject(ctx, failpoint.CacheRefreshClaimed)
	c.emit(ctx, EventRefresh, k.user, 0, nil)
	ld := c.loadHoldingAs(ctx, k, it, load, l, r, old)
	if errors.Is(ld.err, errRebuilt) {
		return "", nil // l is freed: the value changed, nothing to refresh
	}
	wctx, cancel := writeContext(ctx)
	defer cancel()
	failpoint.Inject(wctx, failpoint.CacheRefreshLoaded)
	if ld.err != nil {
		err := l.Refresh(wctx, c.s.backoff)
		c.log(slog.LevelWarn, "background refresh failed; serving stale", "key", k.user, "err", ld.err)
		if err != nil && !errors.Is(err, lock.ErrNotHeld) {
			c.serverError(k.user, err)
		}
		c.announceNothing(wctx, k, l, ld.err)
		return k.user, ld.err
	}
	c.replaceOld(wctx, k, l, old, ld)
	return k.user, nil
}

// stillHolds reports whether the key still holds old now that l is held.
// Between the read and the lock another process may have rebuilt the
// value and released the lock: then there is nothing to do, and l is
// released. A failed read is no evidence of a change: the conditional
// write that follows the load decides.
func (c *Cache) stillHolds(ctx context.Context, k keys, l *lock.Lock, old []byte) bool {
	if c.rebuilt(ctx, k, l, old) {
		c.release(ctx, k, l)
		return false
	}
	return true
}

// replaceOld ends the rebuild that holds the rebuild lock l over old, with
// ld: it writes the new entry if the key still holds old, deletes old
// when the loader found nothing and nothing is to be stored, announces
// the outcome and then frees l (in that order, as every claim: a waiter
// that finds l free has the outcome on its way). ctx is the write
// context.
func (c *Cache) replaceOld(ctx context.Context, k keys, l *lock.Lock, old []byte, ld loaded) {
	if !ld.storable() {
		if ld.err == nil {
			// The loader found nothing where old (a stale value, or one
			// nobody could use) is stored: end it, or it would be served
			// and refreshed again and again.
			c.endOld(ctx, k, old)
		}
		c.announceNothing(ctx, k, l, ld.err)
		c.release(ctx, k, l)
		return
	}
	val, ttl := c.entry(ld.it, ld.res.payload, ld.res.notFound, ld.took, ld.res.tags)
	wrote, werr := c.conn.SetIfEqual(ctx, k.value, string(old), val, ttl)
	failpoint.Inject(ctx, failpoint.CacheWritten)
	c.noteWrite(k, wrote, werr)
	switch {
	case refused(werr):
		c.announce(ctx, k, l, noticeError, werr.Error())
	default:
		if wrote && werr == nil {
			storedNotice(ctx)
		}
		c.announceWrite(ctx, k, l, wrote, val)
	}
	c.release(ctx, k, l)
}

// endOld deletes the value key if it still holds old.
func (c *Cache) endOld(ctx context.Context, k keys, old []byte) {
	deleted, err := c.conn.DeleteIfEqual(ctx, k.value, string(old))
	c.noteWrite(k, deleted, err)
}
