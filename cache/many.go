package cache

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hotkv/stampede/internal/failpoint"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/loader"
)

// GetOrLoadMany returns the values for keys, loading those that are
// missing with one call of load, and makes sure that, per key, concurrent
// callers in this process and in every other process sharing the server
// cause one load between them, as GetOrLoad does:
//
//   - the near cache (Options.Near) answers first, then one MGET reads the
//     other keys (on a Redis Cluster one MGET per hash slot, all sent in
//     one pipeline);
//   - fresh values are returned; stale ones are returned at once and
//     refreshed together in one background load (one per process at a
//     time per key, one in the cluster);
//   - the missing keys are claimed in one pipeline, and load is called once
//     with the keys this call claimed; their values are written, the
//     claims released and the outcome announced as after GetOrLoad's load;
//   - keys that another process claimed are waited for (by announcement,
//     polling as a safety net), all at once; keys that a GetOrLoad or
//     GetOrLoadMany of this process is loading already are joined, not
//     loaded again.
//
// load gets the keys to load (a subset of keys, each once, never empty)
// and returns the values it found. A key missing from its map is not
// found: it is stored for Expiry.Negative, like loader.ErrNotFound from
// GetOrLoad's loader, and left out of the result. load returning
// loader.ErrNotFound means that none of its keys was found. Expire, called
// from load, sets the lifetime of every value of that call. Values of keys
// that were not asked for are ignored.
//
// The result holds an entry for every key with a value. A key that is not
// found has none, and no error. A key whose load failed (load's error, a
// *loader.PanicError if load panicked, ErrValueTooLarge, a failed encode,
// ErrWaitTimeout, ErrRemoteLoad from another process's failed load) has
// none either: the error is a *BatchError listing it with its error (for
// load's error, every key of that call), and the result still holds every
// other key's value. Loader errors are never stored. Other errors end the
// whole call with a nil map: lock.ErrInvalid (a nil Cache or loader, an empty
// key, named by its position), ErrClosed, and the caller's own
// cancellation or deadline. Keys may repeat: each is read and loaded
// once. No keys returns an empty map without a server call.
//
// Keys whose first attempt does not settle them continue as GetOrLoad
// would, and those that then need a load (a value nobody can decode, an
// expired not-found, the claim of a process that died, LoadOnWaitTimeout)
// get one of their own: load called with that one key. If the server
// cannot be reached, the missing keys are loaded in one call without it
// (fail open) and not stored.
//
// WARNING: concurrent callers share one load's result and its timeout: the
// load runs on a context detached from all callers (it keeps the first
// caller's values, not its cancellation) and limited by LoadTimeout. Each
// caller's own ctx only decides how long that caller waits. The callers
// of one key's load in a process get the same decoded value, as with
// GetOrLoad.
//
// NOTE: every key of one call shares the call's options (WithExpiry and the
// others).
func GetOrLoadMany[V any](ctx context.Context, c *Cache, keys []string, load func(ctx context.Context, keys []string) (map[string]V, error), opts ...LoadOption) (map[string]V, error) {
	if c == nil {
		return nil, invalid("nil *Cache")
	}
	if load == nil {
		return nil, invalid("nil loader for GetOrLoadMany")
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
	uniq, err := distinct(keys)
	if err != nil {
		return nil, err
	}
	out := make(map[string]V, len(uniq))
	if len(uniq) == 0 {
		return out, nil
	}
	it, err := c.loadItem(opts)
	if err != nil {
		return nil, err
	}
	m := &many[V]{c: c, it: it, load: load, out: out}
	rest := uniq
	if c.near != nil {
		rest = m.fromNear(ctx, uniq)
	}
	pending, err := m.fromServer(ctx, rest)
	if err != nil {
		return nil, err
	}
	m.refreshStale(ctx)
	if err := m.settle(ctx, pending); err != nil {
		return nil, err
	}
	if len(m.failed) > 0 {
		return out, &BatchError{Errors: m.failed}
	}
	return out, nil
}

// BatchError is GetOrLoadMany's error when some keys failed: Errors holds
// each such key with its error. errors.Is and errors.As look through every
// one of them (ErrWaitTimeout, *loader.PanicError, the loader's error).
type BatchError struct {
	Errors map[string]error
}

func (e *BatchError) Error() string {
	keys := make([]string, 0, len(e.Errors))
	for k := range e.Errors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "cache: %d keys failed", len(keys))
	for i, k := range keys {
		if i == 3 {
			b.WriteString("; …")
			break
		}
		fmt.Fprintf(&b, "; %q: %v", k, e.Errors[k])
	}
	return b.String()
}

// Unwrap returns the distinct errors of the failed keys.
func (e *BatchError) Unwrap() []error {
	seen := make(map[error]bool, len(e.Errors))
	var errs []error
	for _, k := range sortedKeys(e.Errors) {
		err := e.Errors[k]
		if isHashable(err) && seen[err] {
			continue
		}
		if isHashable(err) {
			seen[err] = true
		}
		errs = append(errs, err)
	}
	return errs
}

func sortedKeys(m map[string]error) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// isHashable reports whether err can be a map key without panicking.
func isHashable(err error) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	_ = map[error]bool{err: true}
	return true
}

// distinct returns keys without repeats, in their first order, or
// lock.ErrInvalid naming the first empty key.
func distinct(keys []string) ([]string, error) {
	seen := make(map[string]struct{}, len(keys))
	uniq := make([]string, 0, len(keys))
	for i, k := range keys {
		if k == "" {
			return nil, invalid("empty key at index %d of GetOrLoadMany", i)
		}
		if _, dup := seen[k]; dup {
			continue
		}
		seen[k] = struct{}{}
		uniq = append(uniq, k)
	}
	return uniq, nil
}

// many is one GetOrLoadMany call.
type many[V any] struct {
	c    *Cache
	it   itemSettings
	load func(ctx context.Context, keys []string) (map[string]V, error)

	out    map[string]V
	failed map[string]error
	stale  []staleKey // values served stale (or due an early refresh)
}

// staleKey is a served value to refresh: old is what is stored.
type staleKey struct {
	k   keys
	old []byte
}

// pendingKey is a key this call found no usable value for, on its way
// through a flight of this process.
type pendingKey struct {
	k      keys
	obs    observation // what this call's read found, for outcome.accepts
	wait   func(context.Context) (outcome, error)
	shared bool // joined a flight another caller started
}

func (m *many[V]) fail(key string, err error) {
	if m.failed == nil {
		m.failed = make(map[string]error)
	}
	m.failed[key] = err
}

// fromNear answers what the near cache can, as nearHit does for
// GetOrLoad, and returns the keys left for the server.
func (m *many[V]) fromNear(ctx context.Context, keys []string) []string {
	c := m.c
	now := coarseNow()
	rest := keys[:0:0]
	for _, key := range keys {
		ne := c.near.lookupKey(key, now.UnixNano())
		if ne == nil {
			rest = append(rest, key)
			continue
		}
		rd := c.decideEntry(&ne.e, c.clock(now))
		c.withTags(ctx, &rd)
		switch rd.use {
		case useNotFound:
		case useValue:
			v, err := nearValue[V](c, key, ne)
			if err != nil {
				rest = append(rest, key) // the server path replaces it
				continue
			}
			m.serve(c.keys(key), v, rd, ne.raw)
		default:
			rest = append(rest, key) // an expired not-found: load again
			continue
		}
		c.report(ctx, key, trail{verdict: rd.event(), near: true})
	}
	return rest
}

// serve puts v, read as rd from raw, in the answer, and notes the
// refresh it calls for.
func (m *many[V]) serve(k keys, v V, rd reading, raw []byte) {
	m.out[k.user] = v
	if rd.refresh {
		m.stale = append(m.stale, staleKey{k: k, old: raw})
	}
}

// todo is a key that fromServer found no usable value for.
type todo struct {
	k     keys
	obs   observation
	bad   []byte
	claim string
	w     *waiter // registered before the read, for a claimed key
	sent  time.Time
	// purged is an entry a tag invalidated, found stored: deleted (see
	// dropInvalidated), the key is loaded with the batch.
	purged []byte
	found  bool // something is stored: replaced as GetOrLoad would (fill)
}

// fromRead answers k from what the read found (r) if it can, counting the
// hit; otherwise it returns what the key's flight needs (ok). w was
// registered for k before the read: it is kept for a claim the flight
// waits for, or one a batch may find taken, and unregistered otherwise.
func (m *many[V]) fromRead(ctx context.Context, k keys, r manyRead, w *waiter, sent time.Time) (t todo, ok bool) {
	c := m.c
	t = todo{k: k, obs: observation{read: true, done: r.done}, sent: sent, found: r.found}
	if !r.found {
		t.w = w // for a claim the batch finds taken (batch.member)
		return t, true
	}
	rd := c.decide(r.raw, c.s.now())
	c.withTags(ctx, &rd)
	switch {
	case rd.use == useWait:
		t.claim, t.obs.claim, t.w = rd.claim, rd.claim, w
		return t, true
	case rd.corrupt():
		c.emit(ctx, EventDecodeFailure, k.user, 0, rd.err)
		t.bad = r.raw
	case rd.use == useValue:
		v, err := decode[V](c, k.user, rd.e.Payload)
		if err != nil {
			t.bad = r.raw
			break
		}
		m.serve(k, v, rd, r.raw)
	}
	if rd.purged {
		t.purged, t.w = r.raw, w
		return t, true
	}
	c.ann.unregister(k.value, w)
	if t.bad != nil || rd.use == useReplace {
		return t, true // an expired not-found, or bytes nobody here can use: replace
	}
	c.report(ctx, k.user, trail{verdict: rd.event()})
	return t, false
}

// fromServer reads keys in one round trip, answers the fresh and stale
// ones, and starts (or joins) a flight for each of the others; the keys
// this call leads that were missing are claimed and loaded together in
// the background (claimAndLoad).
func (m *many[V]) fromServer(ctx context.Context, users []string) ([]pendingKey, error) {
	c := m.c
	if len(users) == 0 {
		return nil, nil
	}
	ks := make([]keys, len(users))
	for i, u := range users {
		ks[i] = c.keys(u)
	}
	todos, down, err := m.read(ctx, ks)
	if err != nil {
		return nil, err
	}
	return m.begin(ctx, todos, down), nil
}

// read reads ks in one round trip, answers what it can (fromRead) and
// returns the keys left; down is true when they are to be loaded without
// the server (fail open). Its error is the caller's own.
func (m *many[V]) read(ctx context.Context, ks []keys) (todos []todo, down bool, err error) {
	c := m.c
	if c.down() {
		failpoint.Inject(ctx, failpoint.CacheDown)
		for _, k := range ks {
			todos = append(todos, todo{k: k})
		}
		return todos, true, nil
	}
	// Register before reading, so that an announcement sent between the
	// read and the wait is not missed (see fill).
	ws := make([]*waiter, len(ks))
	for i, k := range ks {
		ws[i] = c.ann.register(k.value)
	}
	sent := time.Now()
	rs, err := c.readMany(ctx, ks)
	if err != nil {
		for i, k := range ks {
			c.ann.unregister(k.value, ws[i])
		}
		if errors.Is(err, errCallerDone) {
			return nil, false, callerErr(ctx)
		}
		c.serverError(ks[0].user, err)
		// A failed server: load without it (fail open). A refusal (an
		// error reply, an ACL): each key goes the way of GetOrLoad's,
		// which answers with it.
		down = !redisx.IsReply(err)
		for _, k := range ks {
			todos = append(todos, todo{k: k, found: !down})
		}
		return todos, down, nil
	}
	for i, r := range rs {
		if t, ok := m.fromRead(ctx, ks[i], r, ws[i], sent); ok {
			todos = append(todos, t)
		}
	}
	m.dropInvalidated(ctx, todos)
	return todos, false, nil
}

// dropInvalidated deletes the values of todos that a tag invalidated, if
// their keys still hold them (see Cache.dropInvalidated), concurrently:
// those deleted are missing keys, which the batch loads together; the
// others (changed meanwhile, or the delete failed) go the way of
// GetOrLoad (fill), which reads them again.
func (m *many[V]) dropInvalidated(ctx context.Context, todos []todo) {
	var at []int
	for i, t := range todos {
		if t.purged != nil {
			at = append(at, i)
		}
	}
	if len(at) == 0 {
		return
	}
	c := m.c
	parallel(len(at), func(j int) {
		t := &todos[at[j]]
		deleted, err := c.dropInvalidated(ctx, t.k, t.purged)
		t.purged = nil
		if err == nil && deleted {
			t.found = false
			return
		}
		c.ann.unregister(t.k.value, t.w)
		t.w = nil
		if err != nil && !redisx.CallerDone(ctx) {
			c.serverError(t.k.user, err)
		}
	})
}

// begin counts each key left as a miss and joins its flight in this
// process, or starts it: a GetOrLoad of the key started later joins this
// call's load. The missing keys whose flight this call started form one
// batch, started here (down: loaded without the server).
func (m *many[V]) begin(ctx context.Context, todos []todo, down bool) []pendingKey {
	c := m.c
	b := newBatch(c, m.it, encodedMany(c, m.load), down)
	pending := make([]pendingKey, 0, len(todos))
	for _, t := range todos {
		c.emit(ctx, EventMiss, t.k.user, 0, nil)
		fn := m.flight(t, b)
		wait, shared := c.flights.Begin(t.k.value, c.background(ctx, m.it.wait), func(ctx context.Context) (outcome, error) {
			return shareValue(c.led(fn(ctx)))
		})
		if shared {
			c.n.coalesced.Add(1)
			b.drop(t.k) // not this call's to load
			if t.w != nil {
				c.ann.unregister(t.k.value, t.w)
			}
		}
		pending = append(pending, pendingKey{k: t.k, obs: t.obs, wait: wait, shared: shared})
	}
	b.start(ctx)
	return pending
}

// flight returns the function of t's flight, should this call start it:
// wait for another process's claim, replace what is stored, or (a missing
// key) load it with batch b.
func (m *many[V]) flight(t todo, b *batch) func(context.Context) (outcome, error) {
	c := m.c
	single := encodedOne(c, t.k.user, m.load)
	switch {
	case t.claim != "":
		return func(ctx context.Context) (outcome, error) {
			return c.awaitClaim(ctx, t.k, m.it, single, t.w, t.claim, t.sent)
		}
	case t.found:
		// Stored but not usable (undecodable, of another type, an expired
		// not-found): replaced under the rebuild lock.
		return func(ctx context.Context) (outcome, error) { return c.fill(ctx, t.k, m.it, single, t.bad, firstRead{}) }
	}
	return b.member(t.k, single, t.w, t.sent)
}

// settle waits for the flights of the pending keys and puts their
// results in out or failed.
func (m *many[V]) settle(ctx context.Context, pending []pendingKey) error {
	c := m.c
	for _, p := range pending {
		res, err := p.wait(ctx)
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("cache: load many: %w", ctx.Err())
		}
		if err == nil && p.shared && !(res.accepts(p.obs) && c.tagsLive(ctx, res)) {
			// The joined flight's result may predate what this call's
			// read saw (a Delete or Set since): go through GetOrLoad,
			// which reads the key again.
			v, err := GetOrLoad(ctx, c, p.k.user, typedOne(p.k.user, m.load), sameItem(m.it))
			switch {
			case errors.Is(err, loader.ErrNotFound):
			case err != nil && ctx.Err() != nil:
				return fmt.Errorf("cache: load many: %w", ctx.Err())
			case err != nil:
				m.fail(p.k.user, err)
			default:
				m.out[p.k.user] = v
			}
			continue
		}
		c.served(res, p.shared) // the GetOrLoad above counts its own
		switch {
		case err != nil:
			m.fail(p.k.user, err)
		case res.notFound:
		default:
			v, err := flightDecode[V](c, p.k.user, res)
			if err != nil {
				m.fail(p.k.user, err)
				continue
			}
			m.out[p.k.user] = v
		}
	}
	return nil
}

// refreshStale starts the background refresh of the stale values served,
// one load for those no refresh of this process is running for.
func (m *many[V]) refreshStale(ctx context.Context) {
	if len(m.stale) == 0 {
		return
	}
	if q := m.it.queue; q != nil { // a Batcher's call: its rounds load them (refreshqueue.go)
		for _, s := range m.stale {
			q.add(ctx, s, m.it)
		}
		return
	}
	m.c.refreshMany(ctx, m.it, m.stale, encodedMany(m.c, m.load))
}

// awaitClaim waits for the rebuild whose claim (token claim) a read sent
// at sent found, on w, registered before that read; then, unless that
// rebuild's announcement answered, continues as fill does, on the same
// waiter and watch: the rebuild's outcome stays its answer whenever it
// arrives.
func (c *Cache) awaitClaim(ctx context.Context, k keys, it itemSettings, load loader.Func[[]byte], w *waiter, claim string, sent time.Time) (outcome, error) {
	wt := &watch{began: time.Now()}
	wt.start = wt.began
	wt.saw(claim, sent, false) // a claim on the value key (MGET found it)
	c.n.waits.Add(1)
	failpoint.Inject(ctx, failpoint.CacheWait)
	n, err := c.await(ctx, k, w, min(it.wait, c.s.poll), sent)
	if err != nil {
		c.ann.unregister(k.value, w)
		return outcome{}, fmt.Errorf("cache: load %q: %w", k.user, err)
	}
	if h := c.heard(ctx, k, n, wt); h.next == answered {
		c.ann.unregister(k.value, w)
		return h.res, h.err
	}
	return c.fillOn(ctx, k, it, load, nil, false, wt, w)
}

// encodedOne is the loader of one key through a batch loader: the key
// missing from the map is loader.ErrNotFound.
func encodedOne[V any](c *Cache, key string, load func(context.Context, []string) (map[string]V, error)) loader.Func[[]byte] {
	return encoded(c, key, typedOne(key, load))
}

func typedOne[V any](key string, load func(context.Context, []string) (map[string]V, error)) loader.Func[V] {
	return func(ctx context.Context) (V, error) {
		var zero V
		got, err := load(ctx, []string{key})
		if err != nil {
			return zero, err
		}
		v, ok := got[key]
		if !ok {
			return zero, loader.ErrNotFound
		}
		return v, nil
	}
}

// manyLoader is a batch loader returning encoded values.
type manyLoader func(ctx context.Context, keys []string) (map[string]encodedValue, error)

// encodedValue is one key's value as the codec encoded it, or why it
// could not be.
type encodedValue struct {
	payload []byte
	err     error
}

// encodedMany wraps load to return the codec's bytes, keeping only the
// keys asked for.
func encodedMany[V any](c *Cache, load func(context.Context, []string) (map[string]V, error)) manyLoader {
	return func(ctx context.Context, keys []string) (map[string]encodedValue, error) {
		got, err := load(ctx, keys)
		if err != nil {
			return nil, err
		}
		out := make(map[string]encodedValue, len(got))
		for _, k := range keys {
			v, ok := got[k]
			if !ok {
				continue
			}
			b, err := c.s.codec.Marshal(v)
			if err != nil {
				err = fmt.Errorf("cache: encode %q: %w", k, err)
			}
			out[k] = encodedValue{payload: b, err: err}
		}
		return out, nil
	}
}
