package cache

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// loaded is the result of a load run while holding a claim or the rebuild
// lock, with what the write that follows needs.
type loaded struct {
	res  outcome
	err  error
	it   itemSettings  // the item's settings, with the TTLs the loader set through Expire
	took time.Duration // how long the loader ran; stored for EarlyRefresh
}

// storable reports whether the load left something to write: a value, or a
// not-found when NegativeTTL stores it. Otherwise the lock is freed and
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
func (c *Cache) loadHolding(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], l *lock.Lock) loaded {
	_, stop := l.KeepAlive(ctx, c.s.lockTTL, 0)
	start := time.Now()
	exp := &expiry{}
	res, err := c.run(context.WithValue(ctx, expiryKey{}, exp), k, load)
	took := time.Since(start)
	if exp.set {
		it.ttl, it.stale = exp.fresh, exp.stale
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
		c.n.writesSkipped.Add(1)
		c.emit(EventWriteSkipped, k.user, 0, nil)
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
	if wrote && len(val) <= inlineMax {
		inline = val
	}
	c.announce(ctx, k, l, noticeValue, inline)
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
// publish costs the waiters a poll interval, not their answer.
func (c *Cache) announce(ctx context.Context, k keys, l *lock.Lock, kind byte, text string) {
	c.nearDrop(k) // this process wrote, or found the key changed
	if c.down() {
		// The write just failed on the connection, or another call's did:
		// do not pay a second timeout; the waiters' poll finds the result.
		return
	}
	err := c.ann.publishOne(ctx, k.value, message(kind, k.value, l.Token(), text))
	if !c.ann.published(err) && err != nil { // a refusal is counted and logged there, not as a failed server
		c.serverError(k.user, err)
	}
}
