package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/engine"
	"github.com/hotkv/stampede/internal/flight"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/lock"
)

// Cache is a read-through cache on a Redis-protocol server shared by many
// processes. It is safe for concurrent use. Use New to create a Cache and
// Close to stop it.
type Cache struct {
	rc    RedisClient
	conn  *redisx.Conn
	locks *lock.Client
	s     settings
	ann   *announcer
	near  *nearCache // nil without Options.Near
	track *tracking  // nil without Options.Near
	reads reads      // hit-path GETs shared by concurrent callers of a key

	flights   flight.Group[outcome] // loads and waits, by value key
	refreshes flight.Group[string]  // by value key; the result is the caller's key if the refresh loaded
	runs      loadRuns              // the loader runs of both, by value key, which fail-open loads join

	sems map[string]*lock.Semaphore // Options.Backends' semaphores, by backend name (backend.go)
	busy sync.Map                   // value key -> backend name, while its load waits for a permit

	downUntil atomic.Int64 // Unix ns until which the server is not tried (fail open)
	warned    sync.Map     // cause -> *atomic.Int64, Unix ns of the last warning about it (see warnOnce)
	n         counters

	mu     sync.Mutex // guards closed's setting and wg.Add
	closed atomic.Bool
	wg     sync.WaitGroup // background work: loads and refreshes
	base   context.Context
	cancel context.CancelFunc // cancels base, ending all background work
}

// outcome is the result of a flight, shared by every caller in it, as is
// its payload's decoded value (val).
type outcome struct {
	payload  []byte
	notFound bool
	// val is payload decoded, once for all the flight's callers in this
	// process (see flightDecode); nil where it is decoded by each.
	val *flightValue

	// What the result rests on, for callers that joined the flight after
	// reading the key themselves (see outcome.accepts): the token of the
	// rebuild claim it came from, if any, and when the flight sent the
	// read or the claim that established it. A zero seen means it did not
	// come through the server (fail open): every caller takes it.
	claim string
	seen  time.Time
	// held, if not zero, is a time at which the claim was still held:
	// the rebuild's write, which replaced the claim (conditional on it,
	// so it had held the key from the claim on), was sent no earlier, or
	// a read that found the claim was sent then. A caller whose read
	// found the key free may take the result if that read returned
	// before held (see outcome.accepts).
	held time.Time
	// tags are the tags of the value and the epochs its load saw (see
	// tags.go), for callers that join the flight after it began.
	tags []codec.TagRef

	// src says whether a load answered (Stats.Served), and whose; user
	// is the caller's key where this process's loader ran (fromLoad),
	// for the EventServed its flight's end reports.
	src  source
	user string
}

// source is where a flight's result came from, for Stats.Served.
type source uint8

const (
	fromStore  source = iota // a stored entry: no load answered
	fromLoad                 // this process's loader, run by this flight (or this batch)
	fromRun                  // a loader run of this process that the flight joined (fail open)
	fromRemote               // another process's load, waited for: its announcement, or what it wrote
)

// New returns a Cache using rc. It makes no server call (with
// Options.Broadcast it subscribes to the namespace's announcement channel
// in the background).
// A nil rc, including a nil *redis.Client, is an error.
func New(rc RedisClient, opts *Options) (*Cache, error) { return newCache(rc, opts, redisx.Recheck) }

// newCache is New, with refusals by the server re-checked after recheck
// (tests shorten it).
func newCache(rc RedisClient, opts *Options, recheck time.Duration) (*Cache, error) {
	if redisx.IsNilClient(rc) {
		return nil, invalid("nil Redis client")
	}
	s, err := opts.settings()
	if err != nil {
		return nil, err
	}
	locks, err := lock.New(rc, &lock.Options{DigestThreshold: s.digest})
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	sems, err := newBackends(locks, s)
	if err != nil {
		return nil, err
	}
	c := &Cache{
		rc:    rc,
		conn:  redisx.NewConn(rc, nil, s.digest),
		locks: locks,
		s:     s,
		sems:  sems,
	}
	c.flights.Recover, c.refreshes.Recover = panicError, panicError
	c.flights.Finished, c.refreshes.Finished = c.flightServed, c.refreshServed
	c.conn.SetRecheck(recheck)
	c.ann = startAnnouncer(rc, s.ns, s.broadcast, c.announceRefused, c.announceRestored)
	c.ann.probe.Recheck = recheck
	c.base, c.cancel = context.WithCancel(context.Background())
	if s.near != nil {
		coarseStart()
		c.near = newNearCache(s.near, s.ns)
		c.track = startTracking(rc, c.near, c.log, c.conn.Recheck)
	}
	return c, nil
}

// Close stops background refreshes and loads and the re-probe of what
// the server offers that a call started (their contexts are cancelled),
// ends the subscription and waits for all of it. Calls after Close return
// ErrClosed. Close is idempotent.
func (c *Cache) Close() error {
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		return nil
	}
	c.closed.Store(true)
	c.mu.Unlock()
	c.cancel()
	c.wg.Wait()
	c.conn.Close()  // after the background work, which may start a re-probe
	c.locks.Close() // its claims' re-probe, as the Cache's own
	c.ann.close()
	if c.near != nil {
		c.track.close()
		c.near.close()
		coarseStop()
	}
	return nil
}

// keys of one entry; all share a hash slot.
type keys struct {
	user  string // the caller's key
	tag   string // redisx.Tag(user)
	value string // NS:{tag}
}

// lock returns the entry's rebuild lock key, NS:{tag}:lock; it is built
// only when needed, keeping the hit path at one key allocation.
func (k keys) lock() string { return k.value + ":lock" }

// failed returns the key of the entry's failure marker, NS:{tag}:fail
// (failed.go).
func (k keys) failed() string { return k.value + ":fail" }

func (c *Cache) keys(key string) keys {
	tag := tagOf(key)
	return keys{user: key, tag: tag, value: c.s.ns + ":{" + tag + "}"}
}

// tagOf returns the part of key's value key between the braces: key
// itself for most keys (no allocation), else a hash of it.
func tagOf(key string) string { return redisx.Tag(key) }

// background returns the start function for a flight: the work runs on a
// context detached from the caller (keeping its values), cancelled by
// Close, and is counted for Close to wait on. A flight may wait up to
// WaitTimeout and then load for up to LoadTimeout (run applies that), plus
// a margin for the server calls around them.
func (c *Cache) background(parent context.Context, wait time.Duration) flight.Starter {
	return func() (context.Context, func(), error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed.Load() {
			return nil, nil, ErrClosed
		}
		c.wg.Add(1)
		limit := addSat(wait, c.s.loadTimeout, 2*writeTimeout) // "forever" options must not wrap around
		ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), limit)
		stop := context.AfterFunc(c.base, cancel)
		return ctx, func() { stop(); cancel(); c.wg.Done() }, nil
	}
}

// clock returns the time of Options.Now's clock, given the real time now
// (the coarse clock's, on near hits).
func (c *Cache) clock(now time.Time) time.Time {
	if c.s.realClock {
		return now
	}
	return c.s.now()
}

func (c *Cache) isClosed() bool { return c.closed.Load() }

// NearActive reports whether the near cache (Options.Near) answers hits
// now: it is configured, the server accepted CLIENT TRACKING, and the
// tracking connections answered within the lease. It is safe for
// concurrent use.
func (c *Cache) NearActive() bool { return c != nil && c.track.active() }

// Fail open: after a transport error the server is left alone for
// FailOpenCooldown, so that a dead server costs one timeout, not one per
// call.
func (c *Cache) down() bool { return c.downUntil.Load() > c.s.now().UnixNano() }

// serverError records a failed server call. Transport errors (refused,
// reset, timed out; not error replies, cancellations or bad arguments)
// start the fail-open cool-down. A call that failed because its caller's
// ctx ended must not come here (see redisx.CallerDone): one caller's
// deadline would switch every caller to fail open.
//
// On a Cluster a transport error also makes the client reload its slot
// map (redisx.Conn.ReloadSlots), so that it follows a promoted replica.
//
// A server that does not answer in the Redis protocol (redisx.IsNotRESP:
// the address is an HTTP server's, say) is treated as unreachable too.
// Every cause is said once per cool-down (see warnOnce), with no Logger
// configured too: running without the cache must never be silent.
func (c *Cache) serverError(key string, err error) {
	c.emit(context.Background(), EventServerError, key, 0, err) // a fact about the server: no call's context
	notRESP := redisx.IsNotRESP(err)
	if redisx.IsTransport(err) || notRESP {
		// On a Cluster the dead node may be a master whose replica takes
		// over: the client's slot map must learn it (see redisx.Conn.ReloadSlots).
		c.conn.ReloadSlots(err)
		until := c.s.now().Add(c.s.off).UnixNano()
		old := c.downUntil.Swap(until)
		switch {
		case notRESP && c.warnOnce("not RESP"):
			c.log(slog.LevelWarn, "the server does not answer in the Redis protocol (is the address a Redis server's?); loading without it",
				"cooldown", c.s.off, "err", err)
		case !notRESP && old < c.s.now().UnixNano():
			c.log(slog.LevelWarn, "server unreachable; loading without it", "cooldown", c.s.off, "err", err)
		}
		return
	}
	if c.warnOnce(failureCause(err)) {
		c.log(slog.LevelWarn, "server call failed (further failures of this kind are not logged during the cool-down)",
			"key", key, "cooldown", c.s.off, "err", err)
	}
}

// failureCause names the kind of a failed call's error, for warnOnce: the
// reply's first word ("BUSY", "OOM", "NOPERM", ...), else its type.
func failureCause(err error) string {
	if k := redisx.ReplyKind(err); k != "" {
		return k
	}
	return fmt.Sprintf("%T", err)
}

// warnOnce reports whether a warning about cause is due: the first, or
// the first after FailOpenCooldown since the last one.
func (c *Cache) warnOnce(cause string) bool {
	now := c.s.now().UnixNano()
	v, _ := c.warned.LoadOrStore(cause, new(atomic.Int64))
	last := v.(*atomic.Int64)
	prev := last.Load()
	if prev != 0 && now-prev < int64(c.s.off) {
		return false
	}
	return last.CompareAndSwap(prev, now)
}

// callerErr returns ctx's error for a call that redisx.CallerDone says
// ended because of ctx, also in the moment before ctx.Err() reports it.
func callerErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return context.DeadlineExceeded
}

// log logs to Options.Logger, or to slog.Default() without one: what
// is logged is what a user must hear (routine events go to Observer).
func (c *Cache) log(level slog.Level, msg string, args ...any) {
	l := c.s.logger
	if l == nil {
		l = slog.Default()
	}
	l.Log(context.Background(), level, "cache: "+msg, args...)
}

// entry encodes payload for storage.
func (c *Cache) entry(it itemSettings, payload []byte, notFound bool, loadTime time.Duration, tags []codec.TagRef) (string, time.Duration) {
	now := c.s.now()
	fresh := it.fresh
	stale := it.stale
	if notFound {
		fresh, stale = it.negative, 0
	}
	// Durations set huge to mean "forever" are clamped, so that fresh+stale
	// neither overflows nor exceeds what the server accepts as an expiry.
	fresh = min(fresh, maxExpiry)
	stale = min(stale, maxExpiry-fresh)
	if c.s.jitter > 0 {
		fresh -= time.Duration(rand.Float64() * c.s.jitter * float64(fresh))
		fresh = max(fresh, time.Millisecond)
	}
	e := codec.Entry{
		Written: now, FreshUntil: now.Add(fresh), LoadTime: loadTime, NotFound: notFound, NoStale: stale <= 0,
		Tags: tags, Payload: payload,
	}
	b := codec.Append(make([]byte, 0, codec.Size(e)), e)
	return string(b), fresh + stale
}

func logRand() float64 {
	r := rand.Float64()
	for r == 0 {
		r = rand.Float64()
	}
	return math.Log(r)
}

// Delete removes key's value and its rebuild lock. A rebuild in progress
// for key will not write its result (it started before the Delete).
// Processes waiting for such a rebuild are told to read the key again.
func (c *Cache) Delete(ctx context.Context, key string) error {
	if err := c.check(key); err != nil {
		return err
	}
	k := c.keys(key)
	pipe := c.rc.Pipeline()
	del := pipe.Del(ctx, k.value, k.lock())
	// As after a Set: waiters elsewhere read the key again now, rather
	// than wait for the announcement of a rebuild that the Delete overtook
	// (they would not take its value, but would wait for it). A lost
	// notice costs them that wait, never correctness.
	pub := c.ann.publish(ctx, pipe, k.value, message(noticeValue, k.value, "", ""))
	_ = redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
	c.ann.published(pub.Err())
	return c.wrote(ctx, "delete", k, del.Err())
}

// check returns why a call of c for key cannot go ahead, or nil. It is
// on every call's path, hits included: this part is inlined, and the
// errors are made in refuse.
func (c *Cache) check(key string) error {
	if c == nil || key == "" || c.closed.Load() {
		return c.refuse(key)
	}
	return nil
}

// refuse is check's error for a call it stops.
func (c *Cache) refuse(key string) error {
	switch {
	case c == nil:
		return invalid("nil *Cache")
	case key == "":
		return invalid("empty key")
	}
	return ErrClosed
}

// Get returns the stored value for key without loading it: ErrMiss if
// there is none (or it is being rebuilt, or cannot be decoded: then the
// error wraps ErrMiss and says why, e.g. a value stored as another type),
// loader.ErrNotFound for a remembered not-found, and a stale value together
// with ErrStale. What it finds counts in Stats as a hit (a value or a
// not-found, fresh), a stale hit (stale) or a miss (ErrMiss); a failed call
// counts as a server error (unless ctx ended it).
func Get[V any](ctx context.Context, c *Cache, key string) (V, error) {
	if err := c.check(key); err != nil {
		var zero V
		return zero, err
	}
	if c.near != nil {
		if v, ok := nearFresh[V](c, key); ok {
			c.report(ctx, key, trail{verdict: EventHit, near: true})
			return v, nil
		}
	}
	var dst engine.Into[V]
	_, err := c.get(ctx, key, &dst, false)
	return dst.V, err
}

// getResult is what one Get found: its answer, the event it counts and
// the entry that holds the value it answers with.
type getResult struct {
	err  error
	kind EventKind // 0: the call failed, nothing to count
	near bool      // answered from the near cache
	raw  []byte    // the entry as stored, when the answer is a value
}

// get is Get, decoding the value it answers with into dst (which
// otherwise holds its zero value). It counts what it found at once or,
// with peek (package middleware's look, see Engine), leaves that to the
// Found it returns, which holds the entry found too.
func (c *Cache) get(ctx context.Context, key string, dst engine.Dst, peek bool) (engine.Found, error) {
	if err := c.check(key); err != nil {
		return engine.Found{}, err
	}
	var g getResult
	ok := false
	if c.near != nil {
		g, ok = c.nearGet(ctx, key, dst)
	}
	if !ok {
		g = c.serverGet(ctx, key, dst)
	}
	switch {
	case g.kind == 0:
		return engine.Found{}, g.err // the call failed
	case peek:
		return engine.NewFound(g.raw, c.counter(ctx, g.kind, key, g.near)), g.err
	}
	c.report(ctx, key, trail{verdict: g.kind, near: g.near})
	return engine.Found{}, g.err
}

// serverGet answers Get from the server.
func (c *Cache) serverGet(ctx context.Context, key string, dst engine.Dst) getResult {
	r := c.read(ctx, c.keys(key))
	if redisx.IsNil(r.err) {
		return getResult{kind: EventMiss, err: ErrMiss}
	}
	if r.err != nil {
		if !redisx.CallerDone(ctx) {
			c.serverError(key, r.err)
		}
		return getResult{err: fmt.Errorf("cache: get %q: %w", key, redisx.Denied("get", r.err, ""))}
	}
	rd := c.decideRead(r, c.s.now())
	c.withTags(ctx, &rd)
	err := gotInto(c, key, rd, dst)
	g := getResult{err: err, kind: gotEvent(rd, err)}
	if rd.use == useValue && (err == nil || errors.Is(err, ErrStale)) {
		g.raw = r.raw // stale too, as from the near cache
	}
	return g
}

// gotInto is what Get answers for the reading rd of key, decoding a
// value into dst: nil for a fresh value, ErrStale for a stale one,
// loader.ErrNotFound for a not-found, fresh or expired (Get does not
// load: it is the last word stored), and otherwise an error wrapping
// ErrMiss.
func gotInto(c *Cache, key string, rd reading, dst engine.Dst) error {
	switch {
	case rd.use == useWait, rd.purged:
		return ErrMiss
	case rd.unverified:
		return fmt.Errorf("%w: the records of %q's tags could not be read", ErrMiss, key)
	case rd.corrupt():
		return fmt.Errorf("%w, %q holds no entry of this cache: %w", ErrMiss, key, rd.err)
	case rd.e.NotFound:
		return loader.ErrNotFound
	}
	switch err := decodeInto(c, key, rd.e.Payload, dst); {
	case err != nil:
		return fmt.Errorf("%w, %w", ErrMiss, err) // e.g. stored as another type
	case rd.stale:
		return ErrStale
	}
	return nil
}

// gotEvent is what Get counts for its answer err to the reading rd.
func gotEvent(rd reading, err error) EventKind {
	switch {
	case errors.Is(err, ErrMiss):
		return EventMiss
	case rd.stale:
		return EventStale
	}
	return EventHit
}

// nearGet answers Get from the near cache, if it can; ok is false when
// the server must be asked.
func (c *Cache) nearGet(ctx context.Context, key string, dst engine.Dst) (g getResult, ok bool) {
	now := coarseNow()
	ne := c.near.lookupKey(key, now.UnixNano())
	if ne == nil {
		return g, false
	}
	rd := c.decideEntry(&ne.e, c.clock(now))
	if c.withTags(ctx, &rd); rd.unverified {
		return g, false // the server path says why
	}
	g.near = true
	switch {
	case rd.purged:
		// The copy is current (the server's tracking would have dropped
		// it), and a tag invalidated it: the key holds nothing to serve.
		g.err = ErrMiss
	case rd.use == useValue:
		if err := nearInto(c, key, ne, dst); err != nil {
			return g, false // the server path says why
		}
		g.raw = ne.raw
		if rd.stale {
			g.err = ErrStale
		}
	default:
		g.err = loader.ErrNotFound // the near tier keeps values and not-founds only
	}
	g.kind = gotEvent(rd, g.err)
	return g, true
}

// Set stores v under key, replacing what is there, and wakes processes
// waiting for key. A rebuild in progress for key will not overwrite it.
func Set[V any](ctx context.Context, c *Cache, key string, v V, opts ...SetOption) error {
	return c.set(ctx, key, v, nil, opts)
}

// set is Set of v, the value of a V. With old set it writes only if key
// still holds old (see setIfUnchanged).
func (c *Cache) set(ctx context.Context, key string, v any, old []byte, opts []SetOption) error {
	if err := c.check(key); err != nil {
		return err
	}
	it, err := c.setItem(opts)
	if err != nil {
		return err
	}
	payload, err := c.s.codec.Marshal(v)
	if err != nil {
		return fmt.Errorf("cache: encode %q: %w", key, err)
	}
	if len(payload) > c.s.maxSize {
		return fmt.Errorf("%w: %q is %d bytes, MaxValueSize is %d", ErrValueTooLarge, key, len(payload), c.s.maxSize)
	}
	k := c.keys(key)
	tags, err := c.tagRefs(ctx, it.tags)
	if err != nil {
		return c.writeFailed(ctx, "set", key, err)
	}
	val, ttl := c.entry(it, payload, false, 0, tags)
	if old != nil {
		return c.setIfUnchanged(ctx, k, string(old), val, ttl)
	}
	pipe := c.rc.Pipeline()
	set := pipe.Set(ctx, k.value, val, ttl)
	pub := c.ann.publish(ctx, pipe, k.value, message(noticeValue, k.value, "", ""))
	_ = redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
	c.ann.published(pub.Err())
	return c.wrote(ctx, "set", k, set.Err())
}

// wrote ends a write (op: "set" or "delete") of k that was sent: Set,
// Delete, and their conditional forms of Engine. Callers from now on must
// not join a flight that began before the write, nor find the old value
// in the near cache: both may predate it. So what this process holds of k
// is dropped (forgetLocal) also when the write failed (err is not nil): a
// write that timed out may have reached the server. A failure is counted
// and returned as writeFailed says.
func (c *Cache) wrote(ctx context.Context, op string, k keys, err error) error {
	c.forgetLocal(k)
	if err != nil {
		return c.writeFailed(ctx, op, k.user, err)
	}
	return nil
}

// writeFailed returns the error of a write (op) of key that failed with
// err, counting it as a server error unless it was the caller's own
// cancellation or deadline.
func (c *Cache) writeFailed(ctx context.Context, op, key string, err error) error {
	if !redisx.CallerDone(ctx) {
		c.serverError(key, err)
	}
	return fmt.Errorf("cache: %s %q: %w", op, key, redisx.Denied(op, err, ""))
}

// flightValue is a flight's payload, or a shared GET's value (see
// reads.go), decoded once for all its callers in this process, as a near
// hit's is (see nearValue): when the one load of the cluster ends, every
// waiting process wakes at the same instant, and a decode in each of its
// callers was CPU that the last of them waited for; a hot key's shared
// GET answers a dozen callers at once. A caller asking for another type
// than the first decodes its own.
type flightValue struct {
	mu  sync.Mutex            // held by the callers that find no value of their type in val, while they decode
	val atomic.Pointer[boxed] // the value decoded first
}

// shareValue gives res, a flight's result, a value decoded once for all
// its callers.
func shareValue(res outcome, err error) (outcome, error) {
	if err == nil && !res.notFound {
		res.val = &flightValue{}
	}
	return res, err
}

// flightDecode returns res.payload, key's value, as a V: the one an
// earlier caller of the flight decoded (every caller of a flight gets the
// same value; NOTE: a value holding a slice, map or pointer must not be
// modified by its callers), or a new one, kept for the next.
func flightDecode[V any](c *Cache, key string, res outcome) (V, error) {
	return sharedDecode[V](c, key, res.val, res.payload)
}

// sharedDecode returns payload, key's value, as a V: the one decoded by an
// earlier caller sharing fv, or a new one, kept in fv for the next; with
// fv nil, a value of the caller's own.
func sharedDecode[V any](c *Cache, key string, fv *flightValue, payload []byte) (V, error) {
	if fv == nil {
		return decode[V](c, key, payload)
	}
	if b := fv.val.Load(); b != nil {
		if v, ok := b.v.(V); ok {
			return v, nil
		}
	}
	fv.mu.Lock()
	defer fv.mu.Unlock()
	if b := fv.val.Load(); b != nil {
		if v, ok := b.v.(V); ok {
			return v, nil
		}
		return decode[V](c, key, payload) // another type than the first caller's
	}
	v, err := decode[V](c, key, payload)
	if err == nil {
		fv.val.Store(&boxed{v: v})
	}
	return v, err
}

// decode returns payload, key's value, decoded as a V; a failure counts
// as a decode failure.
func decode[V any](c *Cache, key string, payload []byte) (V, error) {
	v, err := decodeUncounted[V](c, key, payload)
	if err != nil {
		return v, c.decodeFailed(key, err)
	}
	return v, nil
}

// decodeUncounted is decode, counting nothing: for the near cache's
// copies, as a caller that cannot decode one reads the key from the
// server, and decodes and counts what it finds there. So each call
// counts the entry it could not decode once.
func decodeUncounted[V any](c *Cache, key string, payload []byte) (V, error) {
	var v V
	if err := c.s.codec.Unmarshal(payload, &v); err != nil {
		var zero V
		return zero, fmt.Errorf("cache: decode %q as %T: %w", key, v, err)
	}
	return v, nil
}

// decodeInto is decode into dst, for Get (see engine.Dst).
func decodeInto(c *Cache, key string, payload []byte, dst engine.Dst) error {
	if err := decodeIntoUncounted(c, key, payload, dst); err != nil {
		return c.decodeFailed(key, err)
	}
	return nil
}

// decodeIntoUncounted is decodeInto counting nothing, for the near
// cache's copies (see decodeUncounted).
func decodeIntoUncounted(c *Cache, key string, payload []byte, dst engine.Dst) error {
	if err := dst.Decode(c.s.codec, payload); err != nil {
		return fmt.Errorf("cache: decode %q as %T: %w", key, dst.Value(), err)
	}
	return nil
}

// decodeFailed counts err, the failed decoding of key's value, and
// returns it.
func (c *Cache) decodeFailed(key string, err error) error {
	c.emit(context.Background(), EventDecodeFailure, key, 0, err)
	return err
}

// forgetLocal drops what this process holds of k that a write to it
// (Set, Delete, a conditional Set) makes old: the flight in progress, so
// that later callers do not join a load from before the write; the loader
// runs a fail-open load would join; and the near cache's copy.
func (c *Cache) forgetLocal(k keys) {
	c.flights.Forget(k.value)
	c.runs.forget(k.value)
	c.nearDrop(k)
}
