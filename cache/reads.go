package cache

import (
	"context"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/engine"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/loader"
)

// The hit path's reads: concurrent callers of one key share GETs. A
// caller may share a GET only if it was sent after the caller started: a
// reply to a GET sent before may predate a Set or Delete that returned
// before the caller started, which the caller must see. So callers join
// a batch that is still open: its GET is not sent yet. The first caller
// opens a batch and yields once before sending it, letting callers that
// are ready to run join (concurrent callers tend to arrive together); a
// caller that finds readDepth GETs of the key in flight opens a batch
// that is sent when one of them returns. That batch too stays open while
// its sender yields once: the callers the returning GET just answered,
// calling again, join it instead of opening the next one, so the callers
// of a hot key do not split into cohorts that each pay a GET. A hot key
// costs about readDepth GETs per round trip per process, not one per
// caller.
const readDepth = 2

// read is what one GET of a value key found.
type read struct {
	raw  []byte
	err  error
	done time.Time // when the reply came
	// For the callers that shared the GET, raw decoded once: its entry
	// (nil if raw is none, e.g. a claim), and its value (see
	// sharedDecode). Both nil for a GET of one caller.
	e   *codec.Entry
	val *flightValue
}

// decideRead is decide for what r read, using its shared entry if it has
// one.
func (c *Cache) decideRead(r read, now time.Time) reading {
	if r.e != nil {
		return c.decideEntry(r.e, now)
	}
	return c.decide(r.raw, now)
}

// readBatch is a GET shared by the callers that joined it.
type readBatch struct {
	done   chan struct{} // closed when r is set
	r      read
	led    bool // sent by its opener or being sent by readDone: readDone must not send it
	joined int  // callers that joined it (under reads.mu)
}

// readSlot is a key's GETs in flight and the batch open for joining.
type readSlot struct {
	inflight int
	open     *readBatch
}

// reads holds the slots of the keys being read, by value key.
type reads struct {
	mu    sync.Mutex
	slots map[string]*readSlot
}

// read returns what a GET of k sent after the call began finds. With the
// near cache on, the GET fills it.
func (c *Cache) read(ctx context.Context, k keys) read {
	rs := &c.reads
	rs.mu.Lock()
	sl := rs.slots[k.value]
	if sl == nil {
		if rs.slots == nil {
			rs.slots = make(map[string]*readSlot)
		}
		sl = &readSlot{}
		rs.slots[k.value] = sl
	}
	b := sl.open
	switch {
	case b != nil:
		b.joined++ // not sent yet: join it
		rs.mu.Unlock()
	case sl.inflight < readDepth:
		b = &readBatch{done: make(chan struct{}), led: true}
		sl.open = b
		rs.mu.Unlock()
		runtime.Gosched() // let callers that are ready to run join
		rs.mu.Lock()
		sl.open = nil
		sl.inflight++
		shared := b.joined > 0
		rs.mu.Unlock()
		if !shared {
			b.r = c.fetch(ctx, k)
			close(b.done)
			c.readDone(k)
			return b.r
		}
		// Others wait for this GET: it must not fail because this caller
		// gives up.
		c.send(k, b, false)
	default:
		b = &readBatch{done: make(chan struct{})} // sent by readDone
		sl.open = b
		rs.mu.Unlock()
	}
	select {
	case <-b.done:
		return b.r
	case <-ctx.Done():
		return read{err: ctx.Err(), done: time.Now()}
	}
}

// readDone ends one of k's GETs in flight: a batch waiting for a place in
// flight is sent now.
func (c *Cache) readDone(k keys) {
	rs := &c.reads
	rs.mu.Lock()
	sl := rs.slots[k.value]
	b := sl.open
	if b == nil || b.led {
		sl.inflight--
		if sl.inflight == 0 && sl.open == nil {
			delete(rs.slots, k.value)
		}
		rs.mu.Unlock()
		return
	}
	b.led = true // b takes the place in flight; its sender closes it
	rs.mu.Unlock()
	c.send(k, b, true)
}

// close ends the joining of b, the batch of k opened by a caller that
// sends it or given its place in flight by readDone.
func (rs *reads) close(k keys, b *readBatch) {
	rs.mu.Lock()
	if sl := rs.slots[k.value]; sl.open == b {
		sl.open = nil
	}
	rs.mu.Unlock()
}

// send sends the shared GET b of k in the background, on a context of the
// Cache's (its callers wait with their own), and then ends it. A batch
// still open (given its place in flight by readDone) stays open while
// the goroutine yields once, so that callers ready to run join it.
func (c *Cache) send(k keys, b *readBatch, open bool) {
	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		if open {
			c.reads.close(k, b)
		}
		b.r = read{err: ErrClosed, done: time.Now()}
		close(b.done)
		c.readDone(k)
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		if open {
			runtime.Gosched() // let callers that are ready to run join
			c.reads.close(k, b)
		}
		ctx, cancel := context.WithTimeout(c.base, writeTimeout)
		b.r = c.fetch(ctx, k)
		cancel()
		if e, err := codec.Decode(b.r.raw); b.r.err == nil && err == nil {
			b.r.e, b.r.val = &e, &flightValue{}
		}
		close(b.done)
		c.readDone(k)
	}()
}

// fetch sends one GET of k. With the near cache trusted it reads the
// key's expiry too and offers the entry to the near cache; the fill is
// registered before the read is sent, so that an invalidation that
// arrives before the reply wins.
func (c *Cache) fetch(ctx context.Context, k keys) read {
	n := c.near
	if n == nil || !c.track.active() {
		raw, err := c.rc.Get(ctx, k.value).Bytes()
		return read{raw: raw, err: err, done: time.Now()}
	}
	t := n.begin(k.tag)
	src, ok := c.track.fillSource(ctx, k.value)
	if !ok {
		n.finish(t, nil)
		raw, err := c.rc.Get(ctx, k.value).Bytes()
		return read{raw: raw, err: err, done: time.Now()}
	}
	var pipe redis.Pipeliner
	if src != nil {
		pipe = src.Pipeline()
	} else {
		pipe = c.rc.Pipeline()
	}
	sent := time.Now()
	get := pipe.Get(ctx, k.value)
	ttl := pipe.PTTL(ctx, k.value)
	_ = redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
	raw, err := get.Bytes()
	if src != nil && err != nil && !redisx.IsNil(err) && ctx.Err() == nil {
		// The reader failed (closed by a reconnect, the slot moved):
		// read without a fill.
		n.finish(t, nil)
		raw, err := c.rc.Get(ctx, k.value).Bytes()
		return read{raw: raw, err: err, done: time.Now()}
	}
	if redisx.IsNoPerm(ttl.Err()) && n.pttlRefused.CompareAndSwap(false, true) {
		c.log(slog.LevelWarn, "near cache not filled: the server refused PTTL; grant +pttl", "err", ttl.Err())
	}
	n.finish(t, c.nearEntry(raw, err, ttl, sent))
	return read{raw: raw, err: err, done: time.Now()}
}

// nearEntry returns what the near cache keeps of a read, or nil when it
// keeps nothing: values and remembered not-founds, not rebuild claims,
// undecodable values or expired not-founds.
func (c *Cache) nearEntry(raw []byte, err error, ttl *redis.DurationCmd, sent time.Time) *nearEntry {
	if err != nil || ttl.Err() != nil {
		return nil
	}
	rd := c.decide(raw, c.s.now())
	if rd.use != useValue && rd.use != useNotFound {
		return nil
	}
	until := int64(math.MaxInt64) // no expiry (PTTL -1)
	switch d := ttl.Val(); {
	case d == -1:
	case d < 0:
		return nil // gone by the time of PTTL
	default:
		until = sent.UnixNano() + int64(d)
	}
	return &nearEntry{raw: raw, e: *rd.e, until: until}
}

// nearValue returns ne's value as a V: the one decoded by an earlier hit
// of the same type, or a new one, kept for the next.
func nearValue[V any](c *Cache, key string, ne *nearEntry) (V, error) {
	if b := ne.val.Load(); b != nil {
		if v, ok := b.v.(V); ok {
			return v, nil
		}
	}
	v, err := decodeUncounted[V](c, key, ne.e.Payload) // the caller's read from the server counts a failure
	if err == nil {
		ne.val.Store(&boxed{v: v})
	}
	return v, err
}

// nearInto is nearValue for Get: ne's value into dst, the one decoded by
// an earlier hit of the same type, or a new one, kept for the next.
func nearInto(c *Cache, key string, ne *nearEntry, dst engine.Dst) error {
	if b := ne.val.Load(); b != nil && dst.Reuse(b.v) {
		return nil
	}
	if err := decodeIntoUncounted(c, key, ne.e.Payload, dst); err != nil {
		return err // the caller's read from the server counts it
	}
	ne.val.Store(&boxed{v: dst.Value()})
	return nil
}

// nearHit answers GetOrLoad from the near cache, if it can: a fresh or
// stale value (starting the refresh a stale one needs, as a read from the
// server would) or a fresh not-found, and the verdict GetOrLoad reports.
// ok is false when the server must be asked.
func nearHit[V any](ctx context.Context, c *Cache, key string, it *itemSettings, load loader.Func[V]) (v V, verdict EventKind, err error, ok bool) {
	ns := coarse.now.Load()
	ne := c.near.lookupKey(key, ns)
	if ne == nil {
		return v, 0, nil, false
	}
	if c.s.beta == 0 {
		if v, ok := nearFreshEntry[V](c, key, ne, ns); ok {
			return v, EventHit, nil, true
		}
	}
	now := time.Unix(0, ns)
	rd := c.decideEntry(&ne.e, c.clock(now))
	c.withTags(ctx, &rd)
	switch rd.use {
	case useNotFound:
		err = loader.ErrNotFound
	case useValue:
		if v, err = nearValue[V](c, key, ne); err != nil {
			return v, 0, nil, false // the server path replaces what this caller cannot decode
		}
		if rd.refresh {
			c.refresh(ctx, c.keys(key), *it, ne.raw, encoded(c, key, load))
		}
	default:
		return v, 0, nil, false // an expired not-found: load again
	}
	return v, rd.event(), err, true
}

// nearFresh is a near hit's shortest path, for a fresh value without tags
// (see nearEntry.plainFresh): ok is false for anything else, which the
// caller's full path decides. Get takes it; GetOrLoad too, without
// EarlyRefresh.
func nearFresh[V any](c *Cache, key string) (v V, ok bool) {
	ns := coarse.now.Load()
	ne := c.near.lookupKey(key, ns)
	if ne == nil {
		return v, false
	}
	return nearFreshEntry[V](c, key, ne, ns)
}

// nearFreshEntry is nearFresh for the entry ne, looked up at ns.
func nearFreshEntry[V any](c *Cache, key string, ne *nearEntry, ns int64) (v V, ok bool) {
	if ns >= ne.plainFresh || !c.s.realClock {
		return v, false
	}
	// What decideEntry and withTags would find, known at the fill.
	v, err := nearValue[V](c, key, ne)
	return v, err == nil
}

// nearDrop drops k's near-cache entry after this process wrote or deleted
// the key, before the server's invalidation arrives: read-your-writes
// within the process.
func (c *Cache) nearDrop(k keys) {
	if c.near != nil {
		c.near.invalidate(k.tag)
	}
}
