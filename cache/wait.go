package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hotkv/stampede/internal/failpoint"
	"github.com/hotkv/stampede/loader"
)

// The waiting path: a caller waits for a rebuild that another process (or
// another caller's flight in this process) runs, rather than load itself.
//
// Across processes, it waits for the rebuild's announcement (announce.go),
// reading the key again every PollInterval in case the announcement is
// lost, and gives up after WaitTimeout. Within a process, callers join one
// flight per key (Cache.flights) and each takes the flight's result only if
// it is at least as new as what its own read of the key found
// (outcome.accepts), so that a call that starts after a Delete or Set
// returned never returns a value from before it.

// join runs fill for the key in this process's flight, or joins the flight
// already running, on behalf of a caller that found no usable value; bad
// and obs are what its own read of the key found, round how many times it
// came back because a joined flight's result was older than that read.
// taken reports whether the caller may return res (outcome.accepts);
// otherwise it reads the key again. Only the first round (0) counts in
// Stats.
func (c *Cache) join(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], bad []byte, obs observation, round int) (res outcome, taken bool, err error) {
	if round > 2 {
		// The key keeps changing under the flights this caller joins:
		// start one of its own (the others' flights go on).
		c.flights.Forget(k.value)
	}
	res, err, shared := c.flights.Do(ctx, k.value, c.background(ctx, it.wait), func(ctx context.Context) (outcome, error) {
		return shareValue(c.led(c.fill(ctx, k, it, load, bad, obs.first())))
	})
	if shared && round == 0 {
		c.n.coalesced.Add(1)
	}
	if err != nil {
		c.served(res, shared) // a load's error is its answer too; the caller's own ctx's is none (zero res)
		return outcome{}, false, c.busyCaller(ctx, k, err)
	}
	taken = !shared || res.accepts(obs) && c.tagsLive(ctx, res)
	if taken {
		c.served(res, shared)
	}
	return res, taken, nil
}

// tagsLive reports whether no tag of res, a flight's result, was
// invalidated since its load began (or cannot be told so: a record the
// server failed to answer for): a caller that joined the flight after
// an invalidation returned must not take a load from before it (see
// tags.go). A soft invalidation leaves it live: a stale value may be
// served.
func (c *Cache) tagsLive(ctx context.Context, res outcome) bool {
	return len(res.tags) == 0 || c.tagState(ctx, res.tags) < tagsUnverified
}

// firstRead is what the read that sent a caller to fill found, as fill
// starts from it.
type firstRead struct {
	// nothing: nothing is stored under the key; fill claims it at once
	// (the claim, SET NX, is the read, and a read before it would only
	// cost the cluster's one rebuild a round trip).
	nothing bool
	// claim is the token of another process's rebuild the read found
	// (with sent, when that read was sent): fill waits for it, subscribed
	// before its next read (see announcer.prepare), and that rebuild's
	// outcome is its answer whenever it arrives (see watch).
	claim string
	sent  time.Time
}

// watch is what one waiter has seen, carried from its first read to its
// last: the claims of the rebuilds it found (a notice of the outcome of
// any of them ends the wait: a value, a not-found, or ErrRemoteLoad), and
// since when it waits. One watch serves one fill.
type watch struct {
	claims []seenClaim // oldest first
	began  time.Time   // when fill began
	start  time.Time   // when the wait began (counted in Stats.Waits); zero until then
}

// seenClaim is a rebuild's claim that a read sent at sent found.
type seenClaim struct {
	token string
	sent  time.Time
	last  time.Time // when the last read that found it was sent
	// replace: the claim is the rebuild lock, found beside bytes the
	// read could not use. That rebuild's write is conditional on the
	// bytes it read itself, which may be older: a Set, then the bytes
	// this read found, may have come after its write and before its
	// announcement. So its value (or not-found) is no answer; the key is
	// read again, and holds it if the write replaced what this read
	// found.
	replace bool
}

// saw records the claim of a rebuild that a read sent at sent found ("":
// none), the rebuild lock if replace.
func (wt *watch) saw(token string, sent time.Time, replace bool) {
	if token == "" {
		return
	}
	if cl := wt.knows(token); cl != nil {
		if sent.After(cl.last) {
			cl.last = sent
		}
		return
	}
	wt.claims = append(wt.claims, seenClaim{token: token, sent: sent, last: sent, replace: replace})
}

// knows returns the claim with token this waiter saw, or nil.
func (wt *watch) knows(token string) *seenClaim {
	for i := range wt.claims {
		if wt.claims[i].token == token {
			return &wt.claims[i]
		}
	}
	return nil
}

// waited reports whether the waiter saw any rebuild's claim.
func (wt *watch) waited() bool { return len(wt.claims) > 0 }

// since is when the wait began, for EventWait's duration: the first
// claim seen counts as its start when no wait was counted yet.
func (wt *watch) since() time.Time {
	if wt.start.IsZero() {
		return wt.began
	}
	return wt.start
}

// fill gets a value for a key that had none usable: it claims the rebuild
// and loads, or waits for the process that claimed it. It runs once per
// key per process at a time, on a background context.
//
// bad is a stored value the caller found but could not decode: finding it
// again means replacing it, not returning it. first is what the caller's
// own read of the key found.
func (c *Cache) fill(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], bad []byte, first firstRead) (outcome, error) {
	wt := &watch{began: time.Now()}
	wt.saw(first.claim, first.sent, false)
	// Registered before the first read, so that an announcement sent
	// between a read and the wait that follows is not missed (as far as
	// the subscription reaches: see await).
	return c.fillOn(ctx, k, it, load, bad, first.nothing, wt, c.ann.register(k.value))
}

// fillOn is fill for a waiter w that has seen wt already (nothing: its
// read found the key free, and it claims it before reading again). It
// unregisters w when it returns.
func (c *Cache) fillOn(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], bad []byte, nothing bool, wt *watch, w *waiter) (outcome, error) {
	defer c.ann.unregister(k.value, w)
	if wt.waited() && !c.down() {
		c.ann.prepare(ctx, k.value, w, c.s.poll)
	}
	for {
		if c.down() {
			return c.loadAlone(ctx, k, load)
		}
		// A notice that came since the last read is dropped: the read
		// about to be made is newer. But not the outcome of a rebuild
		// this caller saw claim the key, which is its answer: that read
		// would find the rebuild's claim gone (an error is announced,
		// never stored) and load, as if it had not waited.
		if n, ok := w.pending(); ok && wt.waited() {
			if h := c.heard(ctx, k, n, wt); h.next == answered {
				return h.res, h.err
			}
		}
		sent := time.Now()
		v := verdict{next: keyFree}
		if nothing {
			nothing = false // a claim that fails reads the key next time round
		} else {
			v = c.step(ctx, k, it, load, bad)
		}
		if v.next == keyFree || v.next == replaceOld {
			v = c.claimAfter(ctx, k, it, load, w, wt, v)
		}
		switch v.next {
		case answered:
			if !wt.start.IsZero() && !v.told {
				// The wait ended by reading the key (a value too large to
				// come with the announcement, a lost announcement, a poll)
				// or by taking over a dead claim: it is a wait all the same.
				c.emit(ctx, EventWait, k.user, time.Since(wt.start), v.err)
				if v.err == nil && v.res.src == fromStore {
					v.res.src = fromRemote // what the load it waited for wrote
				}
			}
			return v.res, v.err
		case readAgain:
			continue
		}
		wt.saw(v.claim, v.seen, v.replace)
		if wt.start.IsZero() {
			wt.start = time.Now()
			c.n.waits.Add(1)
			failpoint.Inject(ctx, failpoint.CacheWait)
		}
		left := it.wait - time.Since(wt.start)
		if left <= 0 {
			return c.waitTimedOut(ctx, k, it, load, v.claim, wt.start)
		}
		n, err := c.await(ctx, k, w, min(left, c.s.poll), sent)
		if err != nil {
			return outcome{}, fmt.Errorf("cache: load %q: %w", k.user, err)
		}
		if h := c.heard(ctx, k, n, wt); h.next == answered {
			return h.res, h.err
		}
	}
}

// claimAfter claims the key that a read found free (v.next keyFree), or
// the rebuild of the value it must replace (replaceOld), and loads. But a
// caller that saw a rebuild's claim (and has not heard how it ended) first
// makes sure that every announcement published before that read has
// reached it: a rebuild that stored nothing announces its outcome and
// only then frees its claim (or its rebuild lock), and the announcement
// may still be on its way on the subscription's connection when the
// read's reply arrives. If it is that rebuild's outcome, it is the
// answer; a failed load is then not run again here. An announcement
// published before this process subscribed reached nobody here: a failure
// is then found in the key's failure marker (failed.go), which the
// rebuild wrote before it freed its claim.
func (c *Cache) claimAfter(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], w *waiter, wt *watch, v verdict) verdict {
	if wt.waited() {
		c.ann.settle(ctx, w, settleBound(c.s.poll, it.wait-time.Since(wt.since())))
		if n, ok := w.pending(); ok {
			if h := c.heard(ctx, k, n, wt); h.next == answered {
				return h
			}
		}
		if h := c.failedBefore(ctx, k, wt); h.next == answered {
			return h
		}
	}
	if v.next == replaceOld {
		return c.replaceUnusable(ctx, k, it, load, v.old, v.seen)
	}
	return c.claimMiss(ctx, k, it, load)
}

// settleMin is the least time claimFree gives the subscription's
// connection to bring the announcements published before its read. The
// check returns as soon as they are in (one round trip on a live
// connection); the bound only matters when the connection is stuck, and
// must not be the poll interval alone: a 1ms poll on a busy machine gave
// up before the round trip came back, and the caller ran again the load
// that had just failed elsewhere.
const settleMin = 250 * time.Millisecond

// settleBound is how long claimFree waits for the announcements before
// its read (see settleMin): at least the poll interval, and no longer
// than what is left of the caller's wait, unless that is less than poll.
func settleBound(poll, left time.Duration) time.Duration {
	return max(poll, min(settleMin, left))
}

// await waits for a notice for w, at most d. A zero notice means: read
// the key again (the poll interval passed, or see below).
//
// Only now does this process subscribe to the key's channel (most callers
// that register find a value and never wait), or join the subscription of
// another waiter of the key in this process. The read of the key that
// found the rebuild to wait for was sent at sent. If the server had
// confirmed the subscription before that, every announcement of a write
// the read did not see reaches w. Otherwise an announcement published
// between the read and the subscription reached nobody here, so once the
// server confirms the subscription the key is read once more: a write
// made before the confirmation is found by that read, one made after it
// is announced to w (both on the key's own server: its shard with sharded
// pub/sub, which is where the key is read). So a write is never learnt
// later than one confirmation's round trip after it, whatever the poll;
// the poll remains for lost messages (a failover); a broken subscription
// connection ends the wait at once (lost), for a read and a wait for the
// next confirmation.
func (c *Cache) await(ctx context.Context, k keys, w *waiter, d time.Duration, sent time.Time) (notice, error) {
	ready, lost := c.ann.subscribe(ctx, k.value, w, sent)
	if ready == nil && !w.dead {
		c.ann.covered.Add(1)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case n := <-w.ch:
		return n, nil
	case <-ready: // nil when covered, or when nothing can be subscribed (poll only)
		c.ann.rechecks.Add(1)
		failpoint.Inject(ctx, failpoint.CacheSubscribed)
		return notice{}, nil // subscribed after the read: read again
	case <-lost: // nil unless covered
		// The confirmation this wait counted on ended (its connection
		// failed): an announcement published until the next one
		// reaches nobody here. Read again; the next wait waits for the
		// next confirmation, then reads once more.
		c.ann.lostWaits.Add(1)
		return notice{}, nil
	case <-t.C:
		return notice{}, nil // poll: read again
	case <-ctx.Done():
		return notice{}, ctx.Err()
	}
}

// heard decides whether the notice n (zero after a poll) ends the wait of
// wt: it does only when n is the outcome of a rebuild whose claim wt saw,
// matched by the claim's token. The verdict is then the outcome (a value,
// a not-found, or the rebuild's error), or else to read the key again.
func (c *Cache) heard(ctx context.Context, k keys, n notice, wt *watch) verdict {
	var cl *seenClaim
	if n.token != "" {
		cl = wt.knows(n.token)
	}
	if cl == nil {
		// A poll, a Set, or news of a rebuild this caller did not see
		// claim the key (it may predate a Delete): read the key again.
		return verdict{next: readAgain}
	}
	switch n.kind {
	case noticeValue, noticeNotFound:
		if cl.replace {
			return verdict{next: readAgain} // see seenClaim.replace
		}
	}
	switch n.kind {
	case noticeValue:
		if n.text == "" {
			return verdict{next: readAgain} // too large to come along: read it
		}
		// The rebuild's own write, whatever its freshness now (a waiter
		// takes what it waited for); not a claim, nor bytes it cannot read.
		// A value of a tag invalidated since its load began is no
		// answer: read the key again, which finds it so and replaces it.
		rd := c.decide([]byte(n.text), c.s.now())
		if rd.use != useWait && !rd.corrupt() {
			if c.withTags(ctx, &rd); rd.purged || rd.unverified {
				return verdict{next: readAgain}
			}
			c.emit(ctx, EventWait, k.user, time.Since(wt.since()), nil)
			// Sent along, the entry was written in place of the claim
			// (announceWrite), after the last read that found it.
			return told(outcome{payload: rd.e.Payload, notFound: rd.e.NotFound, claim: cl.token, seen: cl.sent, held: cl.last, tags: rd.e.Tags, src: fromRemote}, nil)
		}
	case noticeNotFound:
		c.emit(ctx, EventWait, k.user, time.Since(wt.since()), nil)
		return told(outcome{notFound: true, claim: cl.token, seen: cl.sent, src: fromRemote}, nil)
	case noticeError:
		err := fmt.Errorf("%w: key %q: %s", ErrRemoteLoad, k.user, n.text)
		if strings.Contains(n.text, ErrPermission.Error()) {
			// The rebuild's write was refused by the ACL: so would
			// this caller's be; tell it so.
			err = remotePermission{err}
		} else if strings.HasPrefix(n.text, ErrBackendBusy.Error()) {
			// The rebuild found its backend's permits held: so would
			// this caller; tell it so.
			err = errors.Join(ErrBackendBusy, err)
		}
		c.emit(ctx, EventWait, k.user, time.Since(wt.since()), err)
		return told(outcome{src: fromRemote}, err)
	}
	return verdict{next: readAgain}
}

// waitTimedOut decides what a caller that waited WaitTimeout for another
// process's rebuild (the claim with token claim, or the rebuild lock when
// claim is "") does: load itself when LoadOnWaitTimeout is set, else fail
// with ErrWaitTimeout. Its own load rests on that claim, for the callers of
// this process that join its flight (outcome.accepts).
func (c *Cache) waitTimedOut(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], claim string, waitStart time.Time) (outcome, error) {
	c.emit(ctx, EventWait, k.user, time.Since(waitStart), ErrWaitTimeout) // counted in WaitTimeouts
	if c.s.loadOnWaitTimeout {
		started := time.Now()
		res, err := c.run(ctx, k, load)
		res.claim, res.seen = claim, started
		return res, err
	}
	return outcome{}, fmt.Errorf("%w (key %q, waited %v)", ErrWaitTimeout, k.user, it.wait)
}

// observation is what a caller's own read of the key found, for deciding
// whether it may take the result of a flight it joined.
type observation struct {
	read  bool      // the caller read the key (not while failing open)
	free  bool      // the read found nothing under the key
	claim string    // the token of the rebuild claim it found, if any
	sent  time.Time // when the read was sent
	done  time.Time // when the read's reply arrived
}

// first is what fill needs to know of the read.
func (o observation) first() firstRead {
	return firstRead{nothing: o.free && o.claim == "", claim: o.claim, sent: o.sent}
}

// accepts reports whether a caller that read the key (obs) and then joined
// a flight started by another caller may take the flight's result o: when
// o is at least as new as what the caller read. That holds when o comes
// from the rebuild whose claim the caller found (a claim's token is never
// used twice, so the key did not change in between), and when the flight
// sent the read or claim that o rests on after the caller's read returned,
// or, for a load run without the server (fail open), began it after then.
// Otherwise the flight may have learned o before a Delete or Set, made in
// any process, that the caller's read already saw (a rebuild that wrote
// just before a Delete, its announcement arriving after it): the caller
// must read the key again, or it would not read its own writes.
//
// And a caller whose read found the key free may take o when o.held
// came after that read returned: the read ran before the claim that o
// rests on was replaced, and not while it was there (it found nothing),
// so before the claim was taken and the load began; a Delete or Set the
// caller saw returned before that. Callers that read the key in the same
// burst as the flight's claim take its result so, without reading the key
// again when every process wakes at once.
func (o outcome) accepts(obs observation) bool {
	switch {
	case !obs.read || o.seen.IsZero():
		return true // the caller failed open: no server to compare with
	case obs.claim != "" && o.claim == obs.claim:
		return true
	case obs.free && obs.claim == "" && o.held.After(obs.done):
		return true
	}
	return o.seen.After(obs.done)
}
