package cache

import (
	"context"
	"errors"
	"time"

	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/engine"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// This file holds soft invalidation: an entry made stale in place, not
// removed, so that readers are answered with it at once while one
// refresh in the cluster replaces it.

// softRounds bounds the reads and conditional writes SoftInvalidate makes
// for a key that changes between them; a key that changes on every
// round is deleted, as Delete does.
const softRounds = 3

// SoftInvalidate marks the values stored under keys stale, in every
// process, instead of removing them: from its return on, a GetOrLoad of
// one of them is answered with the stale value at once and starts one
// refresh in the whole cluster (as for any stale value, whatever the
// value's stale window was), and Get answers it with ErrStale. An entry
// keeps the time to live it has on the server: it is served stale until
// the server drops it, or a refresh or a Set replaces it. A remembered
// not-found becomes an expired one, which the next GetOrLoad loads
// again. It is safe for concurrent use.
//
// An invalidation wins over every load and refresh that began before it:
// the entry is rewritten only if it still holds what was read (SET IFEQ,
// KEEPTTL, or a script where the server has none), so a refresh in
// progress, whose write is conditional on the old entry, stores nothing.
// A key that holds no value nor not-found (nothing, or the claim of a
// load in progress) is deleted as Delete deletes it, so that such a load
// is not stored either. A key that changes between the read and the
// write is read again, a few times, then deleted.
//
// What this process holds of each key is dropped, and processes waiting
// for a key are told to read it again, as after Delete; other processes'
// near caches drop their copies through the server's tracking
// invalidation, as after any write. All keys together take three round
// trips (the reads; the conditional writes; the deletes and the
// notices), not three per key, but on a server without SET IFEQ (or, for
// an entry above the digest threshold, without SET IFDEQ), where each
// conditional write is a script call of its own.
//
// It returns the same errors as Delete for a nil Cache, an empty key or a
// closed Cache, and otherwise an error naming each key it could not
// invalidate; the others are invalidated. Without keys it does nothing.
func (c *Cache) SoftInvalidate(ctx context.Context, keys ...string) error {
	for _, key := range keys {
		if err := c.check(key); err != nil {
			return err
		}
	}
	if c == nil {
		return invalid("nil *Cache")
	}
	errs := make([]error, len(keys))
	todo := make([]int, len(keys)) // indexes into keys still to invalidate
	for i := range keys {
		todo[i] = i
	}
	var drop []int // keys to delete: nothing servable, or changing on every round
	for round := 0; len(todo) > 0; round++ {
		if round == softRounds {
			drop = append(drop, todo...)
			break
		}
		raws, err := c.readRaw(ctx, keys, todo)
		if err != nil {
			for _, i := range todo {
				errs[i] = c.writeFailed(ctx, "soft invalidate", keys[i], err)
			}
			break
		}
		var ops []redisx.CondSet
		var marked []int
		for j, i := range todo {
			next, ok := c.staleNow(raws[j])
			if !ok {
				drop = append(drop, i)
				continue
			}
			ops = append(ops, redisx.CondSet{Key: c.keys(keys[i]).value, Old: string(raws[j]), Next: next, TTL: redisx.KeepTTL})
			marked = append(marked, i)
		}
		todo = todo[:0]
		ok, werrs := c.conn.SetIfEqualMany(ctx, ops)
		var written []int
		for j, i := range marked {
			switch {
			case werrs[j] != nil:
				errs[i] = c.wrote(ctx, "soft invalidate", c.keys(keys[i]), werrs[j])
			case ok[j]:
				written = append(written, i)
			default:
				todo = append(todo, i) // changed since it was read: again
			}
		}
		if len(written) > 0 || len(drop) > 0 {
			c.deleteAndNotify(ctx, keys, written, drop, errs)
			drop = drop[:0]
		}
	}
	if len(drop) > 0 {
		c.deleteAndNotify(ctx, keys, nil, drop, errs)
	}
	return errors.Join(errs...)
}

// readRaw reads the value keys of keys[i] for each i of idx, in one
// pipeline: nil for a key that holds nothing.
func (c *Cache) readRaw(ctx context.Context, keys []string, idx []int) ([][]byte, error) {
	pipe := c.rc.Pipeline()
	cmds := make([]*redis.StringCmd, len(idx))
	for j, i := range idx {
		cmds[j] = pipe.Get(ctx, c.keys(keys[i]).value)
	}
	_ = redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
	raws := make([][]byte, len(idx))
	for j, cmd := range cmds {
		b, err := cmd.Bytes()
		switch {
		case redisx.IsNil(err):
		case err != nil:
			return nil, err
		default:
			raws[j] = b
		}
	}
	return raws, nil
}

// staleNow returns raw, a value key's contents, rewritten stale (fresh
// until staleMark) with a stale window (NoStale unset), every other
// field kept, or ok false when raw is no entry (nothing, a claim, bytes
// this version cannot read). The result always differs from raw, so
// that a write conditional on raw (a refresh in progress) fails after it.
func (c *Cache) staleNow(raw []byte) (next string, ok bool) {
	if raw == nil {
		return "", false
	}
	e, err := codec.Decode(raw)
	if err != nil {
		return "", false
	}
	// Fresh until long ago, not until now: a reader whose clock lags
	// the writer's (another process's, or the near cache's coarse clock)
	// must read it stale too. Marked again, a millisecond earlier still,
	// so that the bytes differ.
	if e.FreshUntil.UnixMilli() > staleMark {
		e.FreshUntil = time.UnixMilli(staleMark)
	} else {
		e.FreshUntil = e.FreshUntil.Add(-time.Millisecond)
	}
	e.NoStale = false
	return string(codec.Append(make([]byte, 0, len(raw)), e)), true
}

// staleMark is the FreshUntil (Unix ms) of an entry soft invalidation
// marked stale: a time every clock reads as past.
const staleMark = 1

// deleteAndNotify ends a soft invalidation: it deletes the keys of keys
// at drop as Delete does (the value key and the rebuild lock), and tells
// the waiters of those and of the keys at written (rewritten stale) to
// read them again, in one pipeline; then drops what this process holds
// of each, recording failures in errs.
func (c *Cache) deleteAndNotify(ctx context.Context, keys []string, written, drop []int, errs []error) {
	pipe := c.rc.Pipeline()
	dels := make([]*redis.IntCmd, len(drop))
	var pubs []*redis.IntCmd
	for j, i := range drop {
		k := c.keys(keys[i])
		dels[j] = pipe.Del(ctx, k.value, k.lock())
		pubs = append(pubs, c.ann.publish(ctx, pipe, k.value, message(noticeValue, k.value, "", "")))
	}
	for _, i := range written {
		k := c.keys(keys[i])
		pubs = append(pubs, c.ann.publish(ctx, pipe, k.value, message(noticeValue, k.value, "", "")))
	}
	_ = redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
	for _, p := range pubs {
		if c.ann.published(p.Err()) {
			break // a refusal is reported once
		}
	}
	for j, i := range drop {
		errs[i] = c.wrote(ctx, "delete", c.keys(keys[i]), dels[j].Err())
	}
	for _, i := range written {
		c.forgetLocal(c.keys(keys[i]))
	}
}

// markStale is SoftInvalidate of one key that holds old, for
// view.MarkStale: it rewrites old stale, keeping the key's time to live,
// only if the key still holds it, and returns engine.ErrChanged when it
// does not (or old is no entry). It ends as a conditional Set does.
func (c *Cache) markStale(ctx context.Context, key string, old []byte) error {
	if err := c.check(key); err != nil {
		return err
	}
	next, ok := c.staleNow(old)
	if !ok {
		return engine.ErrChanged
	}
	k := c.keys(key)
	written, err := c.conn.SetIfEqual(ctx, k.value, string(old), next, redisx.KeepTTL)
	switch {
	case err == nil && !written:
		return engine.ErrChanged
	case err == nil:
		c.ann.published(c.ann.publishOne(ctx, k.value, message(noticeValue, k.value, "", "")))
	}
	return c.wrote(ctx, "soft invalidate", k, err)
}
