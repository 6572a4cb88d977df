package cache

import (
	"context"
	"time"

	"github.com/hotkv/stampede/internal/engine"
)

// init gives package middleware of this module, through the internal
// package engine, the typed operations it needs of a Cache beyond this
// package's API (see engine.View); they are not public API.
func init() { engine.Of = func(c any) engine.View { return view{c.(*Cache)} } }

// view is the engine.View of a Cache.
type view struct{ c *Cache }

// Peek implements engine.View: Get, counted when the Found says.
func (v view) Peek(ctx context.Context, key string, dst engine.Dst) (engine.Found, error) {
	return v.c.get(ctx, key, dst, true)
}

// SetIfUnchanged implements engine.View.
func (v view) SetIfUnchanged(ctx context.Context, key string, val any, old []byte, ttl, stale time.Duration) error {
	if old == nil {
		return engine.ErrChanged // no entry was found: nothing to be unchanged
	}
	return v.c.set(ctx, key, val, old, []SetOption{WithExpiry(Expiry{Fresh: ttl, Stale: stale})})
}

// DeleteIfUnchanged implements engine.View.
func (v view) DeleteIfUnchanged(ctx context.Context, key string, old []byte) error {
	c := v.c
	if err := c.check(key); err != nil {
		return err
	}
	if old == nil {
		return engine.ErrChanged
	}
	k := c.keys(key)
	deleted, err := c.conn.DeleteIfEqual(ctx, k.value, string(old))
	switch {
	case err == nil && !deleted:
		return engine.ErrChanged
	case err == nil:
		// As after Delete: waiters read the key again.
		c.ann.published(c.ann.publishOne(ctx, k.value, message(noticeValue, k.value, "", "")))
	}
	return c.wrote(ctx, "delete", k, err) // as Delete ends, failed or not
}

// Expire implements engine.View.
func (view) Expire(ctx context.Context, fresh, stale time.Duration) bool {
	return expire(ctx, fresh, stale)
}

// MaxValueSize implements engine.View.
func (v view) MaxValueSize() int { return v.c.s.maxSize }

// setIfUnchanged is Set for view.SetIfUnchanged: it writes val only if
// the value key still holds old, the entry a Peek found, in one
// conditional write (SET IFEQ, or a script where the server has no SET
// IFEQ), so a Delete or Set that came after that Peek wins. It returns
// engine.ErrChanged when the key holds something else, or nothing. It
// ends as Set does: what this process holds of the key is dropped, also
// when the write failed, and a failure counts as a server error.
func (c *Cache) setIfUnchanged(ctx context.Context, k keys, old, val string, ttl time.Duration) error {
	written, err := c.conn.SetIfEqual(ctx, k.value, old, val, ttl)
	switch {
	case err == nil && !written:
		return engine.ErrChanged
	case err == nil:
		// Waiters are woken as after Set (whose pipeline carries this too).
		c.ann.published(c.ann.publishOne(ctx, k.value, message(noticeValue, k.value, "", "")))
	}
	return c.wrote(ctx, "set", k, err)
}

// OnStored implements engine.View.
func (view) OnStored(ctx context.Context, fn func()) context.Context { return onStored(ctx, fn) }

// MarkStale implements engine.View.
func (v view) MarkStale(ctx context.Context, key string, old []byte) error {
	if old == nil {
		if err := v.c.check(key); err != nil {
			return err
		}
		return engine.ErrChanged
	}
	return v.c.markStale(ctx, key, old)
}
