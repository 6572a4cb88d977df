package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hotkv/stampede/internal/failpoint"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/loader"
)

// GetOrLoad returns the value for key, loading it with load when it is
// missing, and makes sure that concurrent callers, in this process and in
// every other process sharing the server, cause one load between them:
//
//   - fresh value: returned after one GET, no lock traffic;
//   - stale value (past Expiry.Fresh, within Expiry.Stale): returned at once, and one
//     process in the cluster refreshes it in the background;
//   - no value: callers in this process share one flight; across processes
//     the one that claims the key loads, writes and announces, the others
//     wait for the announcement (polling as a safety net) and read the
//     value; a claim whose owner died expires after LockTTL and is taken
//     over.
//
// A loader error is returned to every caller waiting for that load, in
// every process, and is never stored; loader.ErrNotFound is stored for
// Expiry.Negative, and when a refresh of a stale value meets it, that value is
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
// caller's own ctx only decides how long that caller waits. The callers
// of one load in a process, and those of a hot key that share one GET,
// get the same decoded value (decoded once): a value holding a slice,
// map or pointer must not be modified by them.
func GetOrLoad[V any](ctx context.Context, c *Cache, key string, load loader.Func[V], opts ...LoadOption) (V, error) {
	var zero V
	if err := c.check(key); err != nil {
		return zero, err
	}
	if load == nil {
		return zero, invalid("nil loader for key %q", key)
	}
	if len(opts) == 0 {
		return getOrLoad(ctx, c, key, load, &c.s.item) // checked by New
	}
	it, err := c.loadItem(opts)
	if err != nil {
		return zero, err
	}
	return getOrLoad(ctx, c, key, load, &it)
}

// getOrLoad is GetOrLoad once its arguments are checked, with the
// settings *it (a Batcher's Get sets it.queue), which it only reads: they
// may be the Cache's own.
func getOrLoad[V any](ctx context.Context, c *Cache, key string, load loader.Func[V], it *itemSettings) (V, error) {
	// The near cache answers while tracking is trusted, whether or not
	// the server is failing open: the tracking connection's own lease
	// bounds what it serves. Only the call's first look asks it; a
	// later round (below) reads the key from the server.
	if c.near != nil {
		if v, verdict, err, ok := nearHit(ctx, c, key, it, load); ok {
			c.report(ctx, key, trail{verdict: verdict, near: true})
			return v, err
		}
	}
	var zero V
	k := c.keys(key)

	// A caller that joins a flight of this process may find that the
	// flight's result predates what its own read saw (see
	// outcome.accepts); it then reads the key again and goes round once
	// more. Only the first round counts in Stats.
	for round := 0; ; round++ {
		var tr *trail // what this call found before its verdict: the first round's only
		if round == 0 {
			tr = &trail{}
		}
		l := looked[V]{verdict: EventMiss}
		if err := l.fromServer(ctx, c, k, *it, load, tr); err != nil {
			return zero, err
		}
		// The verdict is reported here, once per call; a miss before the
		// caller joins the flight, so that Stats shows it while it waits.
		if tr != nil {
			tr.verdict = l.verdict
			c.report(ctx, key, *tr)
		}
		if l.hit {
			return l.v, l.err
		}
		res, taken, err := c.join(ctx, k, *it, encoded(c, key, load), l.bad, l.obs, round)
		if err != nil {
			return zero, err
		}
		if !taken {
			continue
		}
		if res.notFound {
			return zero, loader.ErrNotFound
		}
		return flightDecode[V](c, key, res)
	}
}

// looked is what GetOrLoad's hit path found: an answer (hit: v and err,
// counted as verdict) or what the flight needs to know (bad, obs).
type looked[V any] struct {
	hit     bool
	v       V
	err     error
	verdict EventKind // EventMiss unless hit
	bad     []byte    // a stored value this caller could not decode
	obs     observation
}

// fromServer is the hit path's read from the server: one GET (shared with
// the concurrent callers of the key, see read), and a fresh or stale entry
// is decoded into l; everything else is left for the flight. It fails
// only when the caller's own context ended.
func (l *looked[V]) fromServer(ctx context.Context, c *Cache, k keys, it itemSettings, load loader.Func[V], tr *trail) error {
	if c.down() {
		failpoint.Inject(ctx, failpoint.CacheDown)
		return nil
	}
	sent := time.Now() // no later than the GET, which waits for its joiners
	r := c.read(ctx, k)
	l.obs = observation{read: true, sent: sent, done: r.done}
	switch {
	case r.err == nil:
		rd := c.decideRead(r, c.s.now())
		c.withTags(ctx, &rd)
		if l.v, l.err, l.hit = served[V](ctx, c, k, it, load, rd, r); l.hit {
			l.verdict = rd.event()
		} else {
			l.bad, l.obs.claim = unusable(rd, r.raw, tr)
		}
	case redisx.IsNil(r.err):
		l.obs.free = true
	case redisx.CallerDone(ctx):
		// The caller's own deadline or cancellation, not a server
		// failure: nobody else must fail open because of it.
		return callerErr(ctx)
	default:
		c.serverError(k.user, r.err)
		l.obs = observation{}
	}
	return nil
}

// served answers GetOrLoad from the reading rd of what the hit path read
// (r), if it can: a value, fresh or stale (starting the refresh it calls
// for), or a fresh not-found. ok is false when the caller must go on to
// the flight. The caller reports the verdict, rd.event().
func served[V any](ctx context.Context, c *Cache, k keys, it itemSettings, load loader.Func[V], rd reading, r read) (v V, err error, ok bool) {
	switch rd.use {
	case useNotFound:
		return v, loader.ErrNotFound, true
	case useValue:
		if rd.refresh {
			c.refresh(ctx, k, it, r.raw, encoded(c, k.user, load))
		}
		if v, err = sharedDecode[V](c, k.user, r.val, rd.e.Payload); err != nil {
			return v, nil, false // e.g. another type under the key: rebuild it
		}
		return v, nil, true
	}
	return v, nil, false
}

// unusable says what the flight needs to know of a reading the hit path
// could not serve: the stored bytes to replace (bad), or the claim of the
// rebuild to wait for. An undecodable entry is recorded in the trail tr
// (nil after the first round), which GetOrLoad reports with the miss.
func unusable(rd reading, raw []byte, tr *trail) (bad []byte, claim string) {
	switch {
	case rd.use == useWait:
		return nil, rd.claim
	case rd.corrupt():
		if tr != nil {
			tr.decodeErr = rd.err
		}
		return raw, ""
	case rd.use == useValue:
		return raw, "" // the caller could not decode it
	}
	return nil, "" // an expired not-found: load again
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

// step reads the key once and decides what fill does next: answer with
// what it found, claim the free key, replace what it cannot use, or wait
// for another process's rebuild.
func (c *Cache) step(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], bad []byte) verdict {
	sent := time.Now() // outcome.seen of what this read finds
	raw, err := c.rc.Get(ctx, k.value).Bytes()
	switch {
	case redisx.IsNil(err):
		return verdict{next: keyFree}
	case err != nil:
		return c.serverFailed(ctx, k, load, err)
	}
	rd := c.decide(raw, c.s.now())
	c.withTags(ctx, &rd)
	switch {
	case rd.purged:
		deleted, err := c.dropInvalidated(ctx, k, raw)
		switch {
		case err != nil:
			return c.serverFailed(ctx, k, load, err)
		case deleted:
			return verdict{next: keyFree}
		}
		return verdict{next: readAgain}
	case rd.use == useWait:
		return waitFor(rd.claim, sent)
	case rd.use == useNotFound:
		return answer(outcome{notFound: true, seen: sent, tags: rd.e.Tags}, nil)
	case rd.use == useValue && (bad == nil || !bytes.Equal(raw, bad)):
		if rd.refresh {
			c.refresh(ctx, k, it, raw, load)
		}
		return answer(outcome{payload: rd.e.Payload, seen: sent, tags: rd.e.Tags}, nil)
	}
	// Undecodable, an expired negative entry, or a value the caller could
	// not decode: replace it (see Cache.claimAfter).
	return verdict{next: replaceOld, old: raw, seen: sent}
}

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
