package cache

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/internal/redisx"

	"github.com/maypok86/otter/v2"

	"github.com/hotkv/stampede/internal/codec"
)

// nearCache is the in-process tier (Options.Near): entries as read from
// the server, by tag (the part of the value key between the braces, which
// for most keys is the caller's key itself, so a hit builds no string).
//
// Coherence rests on three rules:
//   - invalidations win over fills: a fill registers a ticket before its
//     read is sent, an invalidation of the tag (from the server, or from
//     this process's own write) cancels it, and a fill installs its entry
//     only while its ticket stands (both under mu);
//   - a flush (lost tracking connection, a lapse of the lease, a change
//     of nodes) bumps the epoch, and fills that began before it install
//     nothing;
//   - entries are served only while every tracking connection answered a
//     ping sent less than a lease ago (trusted).
type nearCache struct {
	store  *otter.Cache[string, *nearEntry]
	lease  time.Duration
	prefix string // "NS:{": the value keys, and their tracking prefix

	mu      sync.Mutex // orders fills, invalidations and flushes
	pending map[string]uint64
	seq     uint64
	epoch   atomic.Uint64

	trusted atomic.Int64 // Unix ns until which entries may be served

	invalidations, flushes atomic.Uint64
	pttlRefused            atomic.Bool // warned once: fills need PTTL
}

// nearEntry is a stored value as one read found it.
type nearEntry struct {
	raw   []byte      // the value as stored, for the conditional writes of a refresh
	e     codec.Entry // raw decoded; e.Payload points into raw
	until int64       // Unix ns: when the server drops the key, as the read saw it
	val   atomic.Pointer[boxed]
	// Set by finish: plain, the entry is a plain user key's, filled under
	// the key itself (see lookupKey); plainFresh, for a value without
	// tags, its FreshUntil in Unix ns (else 0): before it, with the real
	// clock and no EarlyRefresh, a hit is a fresh one (see nearHit).
	plain      bool
	plainFresh int64
}

// boxed is an entry's decoded value, kept for the next hit of the same
// type.
type boxed struct{ v any }

// nearOverhead is what an entry costs besides its bytes, for MaxBytes.
const nearOverhead = 64

func newNearCache(n *Near, ns string) *nearCache {
	o := &otter.Options[string, *nearEntry]{}
	size := func(tag string, e *nearEntry) int64 { return int64(len(e.raw) + len(tag) + nearOverhead) }
	switch {
	case n.MaxBytes > 0:
		// With MaxEntries too, every entry weighs at least MaxBytes /
		// MaxEntries, so that no more than MaxEntries fit.
		floor := int64(0)
		if n.MaxEntries > 0 {
			floor = n.MaxBytes / int64(n.MaxEntries)
		}
		o.MaximumWeight = uint64(n.MaxBytes)
		o.Weigher = func(tag string, e *nearEntry) uint32 {
			return uint32(min(max(size(tag, e), floor), math.MaxUint32))
		}
	default:
		o.MaximumSize = n.MaxEntries
	}
	return &nearCache{
		store:   otter.Must(o),
		lease:   n.Lease,
		prefix:  ns + ":{",
		pending: make(map[string]uint64),
	}
}

// lookup returns tag's entry if it may be served at now (Unix ns, by the
// coarse clock).
func (n *nearCache) lookup(tag string, now int64) *nearEntry {
	if !n.servable(now) {
		return nil
	}
	e, ok := n.store.GetIfPresent(tag)
	if !ok || now >= e.until {
		return nil
	}
	return e
}

// lookupKey is lookup for the user key key. A plain key is its own tag,
// so it is looked up as it is, before its bytes are checked (or hashed,
// see redisx.Tag): an entry found under key is key's only if it was
// filled for a plain key, since tag records ("tag ...") and hashed keys
// ("#...") are kept under names that a key that is not plain may equal.
func (n *nearCache) lookupKey(key string, now int64) *nearEntry {
	if !n.servable(now) {
		return nil
	}
	e, ok := n.store.GetIfPresent(key)
	if !ok || !e.plain {
		tag := redisx.Tag(key)
		if tag == key {
			return nil
		}
		if e, ok = n.store.GetIfPresent(tag); !ok {
			return nil
		}
	}
	if now >= e.until {
		return nil
	}
	return e
}

// servable reports whether entries may be served at now (Unix ns, by the
// coarse clock).
func (n *nearCache) servable(now int64) bool {
	trusted := n.trusted.Load()
	if now >= trusted {
		return false
	}
	// Pings renew the trust every Lease/4, so it normally has more than
	// half a Lease left. When it has less, pings are late: the coarse
	// clock may lag too (a process short of CPU), and the real one
	// decides. So the Lease is overrun only by a lag above Lease/2.
	return trusted-now >= int64(n.lease/2) || time.Now().UnixNano() < trusted
}

// nearTicket is a fill in progress: its read was sent after begin.
type nearTicket struct {
	tag        string
	seq, epoch uint64
}

// begin registers a fill of tag; call it before the read is sent, and
// finish after.
func (n *nearCache) begin(tag string) nearTicket {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.seq++
	n.pending[tag] = n.seq
	return nearTicket{tag: tag, seq: n.seq, epoch: n.epoch.Load()}
}

// finish ends the fill t and installs e (nil: nothing to install) unless
// an invalidation of its tag, a flush or a later fill of the tag came
// first.
func (n *nearCache) finish(t nearTicket, e *nearEntry) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pending[t.tag] != t.seq {
		return
	}
	delete(n.pending, t.tag)
	if e != nil && n.epoch.Load() == t.epoch {
		e.plain = redisx.Plain(t.tag)
		if !e.e.NotFound && len(e.e.Tags) == 0 {
			// In range as the server's bytes may not be: 0 (never fresh
			// here) before 1970, the largest time after 2262.
			ms := max(e.e.FreshUntil.UnixMilli(), 0)
			e.plainFresh = int64(math.MaxInt64)
			if ms < math.MaxInt64/int64(time.Millisecond) {
				e.plainFresh = ms * int64(time.Millisecond)
			}
		}
		n.store.Set(t.tag, e)
	}
}

// invalidate drops tag's entry and cancels the fills of tag in progress.
func (n *nearCache) invalidate(tag string) {
	n.mu.Lock()
	delete(n.pending, tag)
	n.store.Invalidate(tag)
	n.mu.Unlock()
	n.invalidations.Add(1)
}

// invalidateKey is invalidate for a server key: a value key of the
// namespace; other keys under the prefix (rebuild locks) are ignored.
func (n *nearCache) invalidateKey(key string) {
	if len(key) <= len(n.prefix) || key[:len(n.prefix)] != n.prefix || key[len(key)-1] != '}' {
		return
	}
	n.invalidate(key[len(n.prefix) : len(key)-1])
}

// flush drops every entry and every fill in progress.
func (n *nearCache) flush() {
	n.mu.Lock()
	n.epoch.Add(1)
	clear(n.pending)
	n.store.InvalidateAll()
	n.mu.Unlock()
	n.flushes.Add(1)
}

func (n *nearCache) close() { n.store.StopAllGoroutines() }
