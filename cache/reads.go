package cache

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/loader"
)

// The hit path's reads: concurrent callers of one key share GETs, in
// batches. A caller that finds no read of the key in flight sends its own;
// one that finds a read in flight does not take its reply, which may have
// been sent before the caller started (and so predate a Set or Delete that
// returned before it did): it joins the batch that waits behind it, whose
// GET is sent when the read in flight returns. So each caller's value was
// read after it started, and a hot key costs one GET per round trip per
// process, not one per caller.

// read is what one GET of a value key found.
type read struct {
	raw  []byte
	err  error
	done time.Time // when the reply came
}

// readBatch is a GET shared by the callers that joined it.
type readBatch struct {
	done chan struct{} // closed when r is set
	r    read
}

// reads holds, by value key, the keys with a GET in flight, and the batch
// forming behind it (nil until a second caller comes).
type reads struct {
	mu    sync.Mutex
	slots map[string]*readBatch
}

// read returns what a GET of k sent after the call began finds. With the
// near cache on, the GET fills it.
func (c *Cache) read(ctx context.Context, k keys) read {
	rs := &c.reads
	rs.mu.Lock()
	next, busy := rs.slots[k.value]
	if !busy {
		if rs.slots == nil {
			rs.slots = make(map[string]*readBatch)
		}
		rs.slots[k.value] = nil
		rs.mu.Unlock()
		r := c.fetch(ctx, k)
		c.readDone(k)
		return r
	}
	if next == nil {
		next = &readBatch{done: make(chan struct{})}
		rs.slots[k.value] = next
	}
	rs.mu.Unlock()
	select {
	case <-next.done:
		return next.r
	case <-ctx.Done():
		return read{err: ctx.Err(), done: time.Now()}
	}
}

// readDone ends k's read in flight: the batch behind it, if any, is sent
// now, in the background (its callers wait with their own contexts).
func (c *Cache) readDone(k keys) {
	rs := &c.reads
	rs.mu.Lock()
	next := rs.slots[k.value]
	if next == nil {
		delete(rs.slots, k.value)
		rs.mu.Unlock()
		return
	}
	rs.slots[k.value] = nil // next is in flight; another batch forms behind it
	rs.mu.Unlock()

	c.mu.Lock()
	if c.closed.Load() {
		c.mu.Unlock()
		next.r = read{err: ErrClosed, done: time.Now()}
		close(next.done)
		c.readDone(k)
		return
	}
	c.wg.Add(1)
	c.mu.Unlock()
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.base, writeTimeout)
		next.r = c.fetch(ctx, k)
		cancel()
		close(next.done)
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
	sent := time.Now()
	pipe := c.rc.Pipeline()
	get := pipe.Get(ctx, k.value)
	ttl := pipe.PTTL(ctx, k.value)
	_, _ = pipe.Exec(ctx)
	raw, err := get.Bytes()
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
	e, st, _ := c.classify(raw)
	if st != stateFresh && st != stateStale || e.NotFound && st == stateStale {
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
	return &nearEntry{raw: raw, e: e, until: until}
}

// nearValue returns ne's value as a V: the one decoded by an earlier hit
// of the same type, or a new one, kept for the next.
func nearValue[V any](c *Cache, key string, ne *nearEntry) (V, error) {
	if b := ne.val.Load(); b != nil {
		if v, ok := b.v.(V); ok {
			return v, nil
		}
	}
	v, err := decode[V](c, key, ne.e.Payload)
	if err == nil {
		ne.val.Store(&boxed{v: v})
	}
	return v, err
}

// nearHit answers GetOrLoad from the near cache, if it can: a fresh or
// stale value (starting the refresh a stale one needs, as a read from the
// server would) or a fresh not-found. ok is false when the server must be
// asked.
func nearHit[V any](ctx context.Context, c *Cache, key string, it itemSettings, load loader.Func[V]) (v V, err error, ok bool) {
	now := time.Now() // once: on some machines reading the clock is most of a hit's cost
	ne := c.near.lookup(tagOf(key), now.UnixNano())
	if ne == nil {
		return v, nil, false
	}
	st := c.stateAt(ne.e, c.clock(now))
	if ne.e.NotFound {
		if st != stateFresh {
			return v, nil, false // an expired not-found: load again
		}
		c.count(EventHit, key, true)
		return v, ErrNotFound, true
	}
	v, err = nearValue[V](c, key, ne)
	if err != nil {
		return v, nil, false // the server path replaces what this caller cannot decode
	}
	if st == stateStale || c.early(ne.e) {
		c.refresh(ctx, c.keys(key), it, ne.raw, encoded(c, key, load))
	}
	if st == stateStale {
		c.count(EventStale, key, true)
	} else {
		c.count(EventHit, key, true)
	}
	return v, nil, true
}

// nearDrop drops k's near-cache entry after this process wrote or deleted
// the key, before the server's invalidation arrives: read-your-writes
// within the process.
func (c *Cache) nearDrop(k keys) {
	if c.near != nil {
		c.near.invalidate(k.tag)
	}
}
