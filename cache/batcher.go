package cache

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/hotkv/stampede/loader"
)

// Batcher reads one family of keys (users by id, say) through one batch
// loader, and sends the background refreshes that fall due in this
// process within BatcherOptions.Window to that loader together: one
// loader call for up to MaxKeys keys, whichever calls (Get or GetMany, of
// one key or many) served them stale. Each key is still claimed by its
// rebuild lock, as every refresh's, so that across processes each stale
// key is refreshed once: a process that does not get a key's lock goes on
// serving the stale value, and does not load it. Callers are served the
// stale value at once and never wait for a round.
//
// It is safe for concurrent use. Use NewBatcher to create one; it needs
// no Close of its own: Close of its Cache ends its rounds (an open round
// is abandoned, its keys' locks freed, nothing loaded).
//
// The loads of Get (a missing key, or a stored value it cannot use) go
// to the loader in rounds too: each key is claimed on its own, as
// GetOrLoad's, so that other processes wait for it, and its loader call
// is shared with the other loads of Get in this process within Window.
// The missing keys of GetMany are loaded as GetOrLoadMany's, with one
// loader call for those of that call, MaxKeys at a time.
//
// NOTE: a caller of Get that loads waits up to Window more than with
// GetOrLoad; callers served a stale value never wait.
type Batcher[V any] struct {
	c      *Cache
	load   func(context.Context, []string) (map[string]V, error) // MaxKeys at a time
	via    LoadOption                                            // routes a call's refreshes to q
	q      *refreshQueue
	misses *loadRounds[V] // Get's loads
}

// BatcherOptions configures a Batcher. The zero value, and nil, mean the
// defaults.
type BatcherOptions struct {
	// Window is how long a refresh that falls due, or a load of Get,
	// waits in this process for others to join its loader call: a round
	// opens with its first key and goes to the loader Window later, or as
	// soon as it holds MaxKeys keys. It must be below a third of the
	// Cache's LockTTL (the keys' locks are held meanwhile). Default: 10ms.
	Window time.Duration
	// MaxKeys is the most keys the loader is called with, by a round or
	// by GetMany. Default: 100.
	MaxKeys int
}

// NewBatcher returns a Batcher of c whose values load loads: given keys
// (each once, never empty, at most MaxKeys), it returns the values it
// found, as GetOrLoadMany's loader does (a key missing from the map is
// not found; loader.ErrNotFound means none was). A nil c or load, a
// negative Window or MaxKeys, or a Window not below LockTTL/3 is an error
// (lock.ErrInvalid). It makes no server call.
func NewBatcher[V any](c *Cache, load func(ctx context.Context, keys []string) (map[string]V, error), opts *BatcherOptions) (*Batcher[V], error) {
	switch {
	case c == nil:
		return nil, invalid("nil *Cache for NewBatcher")
	case load == nil:
		return nil, invalid("nil loader for NewBatcher")
	}
	window, maxKeys, err := opts.settings(c.s.lockTTL)
	if err != nil {
		return nil, err
	}
	lim := limited(load, maxKeys)
	q := newRefreshQueue(c, encodedMany(c, lim), window, maxKeys)
	return &Batcher[V]{c: c, load: lim, via: viaQueue{q}, q: q, misses: &loadRounds[V]{c: c, q: q, load: lim}}, nil
}

func (o *BatcherOptions) settings(lockTTL time.Duration) (window time.Duration, maxKeys int, err error) {
	if o == nil {
		o = &BatcherOptions{}
	}
	window, maxKeys = or(o.Window, 10*time.Millisecond), or(o.MaxKeys, 100)
	switch {
	case o.Window < 0:
		return 0, 0, invalid("BatcherOptions.Window %v is negative", o.Window)
	case o.MaxKeys < 0:
		return 0, 0, invalid("BatcherOptions.MaxKeys %d is negative", o.MaxKeys)
	case window >= lockTTL/3:
		return 0, 0, invalid("BatcherOptions.Window %v is not below a third of LockTTL (%v): the keys' rebuild locks are held through it", window, lockTTL)
	}
	return window, maxKeys, nil
}

// Get returns the value for key as GetOrLoad does, with the Batcher's
// loader: a missing value is claimed as GetOrLoad claims it and loaded in
// a round with the other loads of Get in this process; a stale value
// served has its refresh sent to the loader in a round with the others
// of this process (see Batcher). opts are GetOrLoad's.
//
// WARNING: as GetOrLoad's, concurrent callers share one load's result and
// its timeout; each caller's own ctx only decides how long it waits.
func (b *Batcher[V]) Get(ctx context.Context, key string, opts ...LoadOption) (V, error) {
	var zero V
	if b == nil {
		return zero, invalid("nil *Batcher")
	}
	if err := b.c.check(key); err != nil {
		return zero, err
	}
	it, err := b.c.loadItem(opts)
	if err != nil {
		return zero, err
	}
	if b.c.near != nil && b.c.s.beta == 0 {
		// Before the loader's closure, which would escape.
		if v, ok := nearFresh[V](b.c, key); ok {
			b.c.report(ctx, key, trail{verdict: EventHit, near: true})
			return v, nil
		}
	}
	it.queue = b.q
	// A capped backend's permit is taken by the round the key's load
	// joins, for the round's one loader call; the key's own load takes
	// none (it would hold one per key while waiting in the round).
	it.round = true
	load := func(ctx context.Context) (V, error) { return b.misses.get(ctx, key, it) }
	call := it // the loader has its own copy: it stays off the heap
	return getOrLoad(ctx, b.c, key, load, &call)
}

// GetMany returns the values for keys as GetOrLoadMany does (its result
// and errors, *BatchError included), loading the missing keys with the
// Batcher's loader, MaxKeys at a time (a failed loader call fails the
// keys of the calls not made yet too), and with the stale values served,
// their refreshes sent to the loader in rounds with the others of this
// process (see Batcher). opts are GetOrLoadMany's.
//
// WARNING: as GetOrLoadMany's, concurrent callers share one load's result
// and its timeout; each caller's own ctx only decides how long it waits.
func (b *Batcher[V]) GetMany(ctx context.Context, keys []string, opts ...LoadOption) (map[string]V, error) {
	if b == nil {
		return nil, invalid("nil *Batcher")
	}
	return GetOrLoadMany(ctx, b.c, keys, b.load, b.options(opts)...)
}

// options returns opts and the option that routes the call's refreshes
// to the Batcher's rounds, without writing to opts' array.
func (b *Batcher[V]) options(opts []LoadOption) []LoadOption {
	return append(slices.Clip(opts), b.via)
}

// viaQueue is the LoadOption of a Batcher's GetMany (Get sets
// itemSettings.queue itself).
type viaQueue struct{ q *refreshQueue }

func (o viaQueue) applyLoad(s itemSettings) itemSettings { s.queue = o.q; return s }

// limited returns load called with at most maxKeys keys at a time, one
// call after another; a failed call ends it with its error.
func limited[V any](load func(context.Context, []string) (map[string]V, error), maxKeys int) func(context.Context, []string) (map[string]V, error) {
	return func(ctx context.Context, keys []string) (map[string]V, error) {
		if len(keys) <= maxKeys {
			return load(ctx, keys)
		}
		out := make(map[string]V, len(keys))
		for part := range slices.Chunk(keys, maxKeys) {
			got, err := load(ctx, part)
			switch {
			case errors.Is(err, loader.ErrNotFound): // none of part
			case err != nil:
				return nil, err
			}
			maps.Copy(out, got)
		}
		return out, nil
	}
}
