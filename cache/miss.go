package cache

import (
	"context"
	"errors"
	"time"

	"github.com/hotkv/stampede/internal/failpoint"
	"github.com/hotkv/stampede/internal/keysub"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// The miss path: nothing is stored under the key. One caller in the
// cluster claims the key, loads, and replaces its claim with the entry;
// the others find the claim and wait for its announcement (wait.go).
//
// The claim is a lock whose value sits where the entry goes. So:
//   - a Delete or Set during the load removes the claim, and the load's
//     write, conditional on the claim, becomes a no-op;
//   - so a load that began before a Delete or Set never writes after it;
//   - a claim whose owner died expires after LockTTL and is taken over.

// claimMiss decides what a caller that found nothing under the key does:
// it claims the key and loads (the verdict is the load's outcome), or,
// when another caller claimed it first, waits for that claim (the claim's
// reply names its holder), or reads the key again (finding the value
// already).
//
// No claim is taken that could not be written or released (an ACL
// refusing the scripts that needs): that refusal is the caller's answer.
func (c *Cache) claimMiss(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte]) verdict {
	if err := c.permitted(ctx, k, nil); err != nil {
		return c.serverFailed(ctx, k, load, err)
	}
	claimed := time.Now()
	l, holder, err := c.claim(ctx, k.value)
	switch {
	case err != nil:
		return c.serverFailed(ctx, k, load, err)
	case l == nil && holder != "":
		return waitFor(holder, claimed)
	case l == nil:
		return verdict{next: readAgain}
	}
	failpoint.Inject(ctx, failpoint.CacheClaimed)
	res, err := c.loadClaimed(ctx, k, it, load, l)
	if errors.Is(err, errRebuilt) {
		return verdict{next: readAgain}
	}
	// The result rests on this claim, taken after the read that found
	// nothing: callers that found the claim may take it (outcome.accepts).
	res.claim, res.seen = l.Token(), claimed
	return answer(res, err)
}

// loadClaimed loads while holding the claim l on the value key, replaces
// the claim with the entry (or frees it when there is nothing to store),
// and announces the outcome. A write refused by the ACL is announced as an
// error but is not this caller's error: it has its value.
//
// A claim with nothing to replace it is freed after the announcement: a
// waiter that reads the key meanwhile (its poll) still finds the claim,
// and then the announcement. Freed first, the key would be free for that
// read, and the waiter would load itself instead of learning of the
// failure.
func (c *Cache) loadClaimed(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], l *lock.Lock) (outcome, error) {
	ld := c.loadHolding(ctx, k, it, load, l, nil)
	if errors.Is(ld.err, errRebuilt) {
		// The claim was ended (a Delete or Set) while the load waited
		// for a backend permit: its waiters were told to read again,
		// and so is its caller (see claimMiss).
		return outcome{}, ld.err
	}
	wctx, cancel := writeContext(ctx)
	defer cancel()
	failpoint.Inject(wctx, failpoint.CacheLoaded)
	if !ld.storable() {
		c.announceNothing(wctx, k, l, ld.err)
		c.release(wctx, k, l)
		return ld.res, ld.err
	}
	val, ttl := c.entry(ld.it, ld.res.payload, ld.res.notFound, ld.took, ld.res.tags)
	// The write happens only while the claim is still there: a claim that
	// is gone (a Delete or Set, or it expired) means the key moved on.
	sent := time.Now()
	pub, werr := c.replaceAnnouncing(wctx, k, l, val, ttl)
	failpoint.Inject(wctx, failpoint.CacheWritten)
	wrote := werr == nil
	if errors.Is(werr, lock.ErrNotHeld) {
		werr = nil
	}
	c.noteWrite(k, wrote, werr)
	if refused(werr) {
		// The claim goes if the server lets it (it does not where the
		// refused write was a script, and the release is one too).
		c.announce(wctx, k, l, noticeError, werr.Error())
		_ = l.Release(wctx)
		return ld.res, nil
	}
	if wrote {
		storedNotice(wctx)
		ld.res.held = sent
	}
	if pub.done {
		c.announcedWith(wctx, k, pub.err)
	} else {
		c.announceWrite(wctx, k, l, wrote, val)
	}
	return ld.res, nil
}

// oneStep is the announcement a write published in its own script (see
// replaceAnnouncing).
type oneStep struct {
	done bool  // the write was done and its script published, or tried to
	err  error // the publish's error reply, if it failed
}

// replaceAnnouncing replaces the claim l with val, as l.Replace does, and
// where it can, in the same script and only if it wrote, publishes the
// announcement of val (announceWrite's message): the waiting processes
// hear of it one round trip sooner, and never of a value that was not
// stored. Where it cannot (the probe does not know the server's pub/sub
// mode, the server refuses scripts to the user, the Broadcast channel is
// on another node of a Cluster), it writes as Replace does and publishes
// nothing: the caller announces after the write, as before. A write that
// found the claim gone published nothing either: the caller announces
// that, which sends the waiters to read the key again.
//
// This process's near cache drops the key before the write: its own
// readers must not find an older entry once the announcement is out.
func (c *Cache) replaceAnnouncing(ctx context.Context, k keys, l *lock.Lock, val string, ttl time.Duration) (oneStep, error) {
	ch, mode := c.ann.channel(ctx, k.value)
	if mode == keysub.Unknown || c.down() || c.ann.twoStep {
		return oneStep{}, l.Replace(ctx, val, ttl)
	}
	c.nearDrop(k)
	msg := message(noticeValue, k.value, l.Token(), inlined(val))
	err := l.ReplaceAndPublish(ctx, val, ttl, ch, msg, mode == keysub.Sharded)
	switch {
	case err == nil:
		return oneStep{done: true}, nil
	case !errors.Is(err, lock.ErrNotPublished):
		return oneStep{}, err
	case errors.Is(err, redisx.ErrNotCombined):
		return oneStep{}, nil // written as Replace writes: announce after it
	}
	// Written, and the script's publish failed: its reply is reported as
	// a publish's (announcedWith), and not sent again.
	var reply redis.Error
	if !errors.As(err, &reply) {
		return oneStep{}, nil
	}
	return oneStep{done: true, err: reply}, nil
}
