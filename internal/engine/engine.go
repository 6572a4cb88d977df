// Package engine declares, as typed methods, what package middleware
// needs of a cache beyond package cache's API: a read that leaves its
// counting in the cache's Stats to the caller and returns the entry as
// stored, a write and a delete that happen only if the key still holds
// such an entry, the lifetime a loader sets from inside, and the largest
// value the cache stores. Package cache implements View; Of returns a
// Cache's. None of this is public API: a user of package cache has
// cache.LoadWithExpiry, and compare-and-set is not offered.
//
// The middleware looks at a key with Peek before it asks GetOrLoad and,
// unless that look answers the request, GetOrLoad counts what it finds:
// counting both would count most requests twice. So a Peek counts
// nothing until Found.Count says to, once the look answers.
package engine

import (
	"context"
	"errors"
	"time"
)

// View is what package middleware uses of a cache beyond package cache's
// API. It is safe for concurrent use.
type View interface {
	// Peek reads key as cache.Get does, with Get's answers (a value,
	// with cache.ErrStale when stale; loader.ErrNotFound; an error
	// wrapping cache.ErrMiss; a failed call's error), and decodes the
	// value it answers with into dst, which otherwise holds its zero
	// value. Unlike Get it counts nothing in the cache's Stats nor as an
	// Event: Found.Count does. A failed call counts as a server error, as
	// Get's does.
	Peek(ctx context.Context, key string, dst Dst) (Found, error)

	// SetIfUnchanged is cache.Set of v with
	// cache.WithExpiry(cache.Expiry{Fresh: ttl, Stale: stale}) that writes only if key still holds old,
	// an entry as Found.Raw returned it, in one conditional write on the
	// server (SET IFEQ, or a script where the server has none): a Set or
	// Delete that came after the Peek wins. It returns ErrChanged, having
	// written nothing, when the key holds something else, or nothing, and
	// when old is nil (the Peek found no value).
	SetIfUnchanged(ctx context.Context, key string, v any, old []byte, ttl, stale time.Duration) error

	// DeleteIfUnchanged is cache.Delete of key that deletes only if key
	// still holds old, an entry as Found.Raw returned it, in one
	// conditional delete on the server (DELEX IFEQ, DELIFEQ, or a script):
	// a Set that came after the Peek wins. It returns ErrChanged, having
	// deleted nothing, when the key holds something else, or nothing, and
	// when old is nil.
	DeleteIfUnchanged(ctx context.Context, key string, old []byte) error

	// MarkStale is cache.(*Cache).SoftInvalidate of key that rewrites it
	// only if key still holds old, an entry as Found.Raw returned it, in
	// one conditional write on the server that keeps the key's time to
	// live: the entry is stale from now on, everything else in it kept.
	// It returns ErrChanged, having written nothing, when the key holds
	// something else, or nothing, and when old is nil.
	MarkStale(ctx context.Context, key string, old []byte) error

	// Expire sets, from inside a loader, how long the value it is about
	// to return stays fresh and then stale, overriding the call's expiry,
	// as a cache.LoadWithExpiry loader's Expiry does. It reports whether
	// ctx belongs to a load whose result will be stored; elsewhere it
	// does nothing. A fresh duration below 1ms is raised to 1ms, a
	// negative stale one to 0, and both are clamped as the cache's
	// ExpiryPolicy is.
	Expire(ctx context.Context, fresh, stale time.Duration) bool

	// OnStored returns ctx carrying fn, which a GetOrLoad called with
	// that ctx calls once the load it started has been written to the
	// server, so that the middleware says it stored a response
	// (Cache-Status) only when it did. fn is not called when nothing was
	// written: the loader failed or found nothing, the server failed or
	// refused the write, a Delete or Set came first, or the call was
	// answered by another load (in this process or another) or by a
	// stored value. fn runs on the load's goroutine, before the call
	// returns unless the load is a background refresh, and must not
	// block.
	OnStored(ctx context.Context, fn func()) context.Context

	// MaxValueSize is the largest encoded value the cache stores
	// (cache.Options.MaxValueSize, or its default).
	MaxValueSize() int
}

// Of returns the View of c, a *cache.Cache. Package cache sets it when
// it is initialised; other packages only call it.
var Of func(c any) View

// ErrChanged is what View.SetIfUnchanged, DeleteIfUnchanged and
// MarkStale return when the key no longer holds the entry expected:
// nothing was written.
var ErrChanged = errors.New("cache: the key changed since it was read")

// Peek is View.Peek decoding into a V: the value (the zero V unless the
// answer is a value, fresh or stale), what the look found, and the
// answer's error.
func Peek[V any](ctx context.Context, v View, key string) (V, Found, error) {
	var dst Into[V]
	f, err := v.Peek(ctx, key, &dst)
	return dst.V, f, err
}

// Found is what one View.Peek found. The zero Found counts nothing and
// holds no entry. It is not safe for concurrent use: the goroutine that
// made the Peek calls Count.
type Found struct {
	// Raw is the entry, as stored, that holds the value Peek answered
	// with (fresh or stale), for SetIfUnchanged; nil when it answered
	// with no value. It is shared: read it only.
	Raw []byte

	count func() // nil: nothing (more) to count
}

// NewFound returns the Found of a Peek that found raw (see Found.Raw)
// and counts what it found with count; a nil count counts nothing (the
// read failed).
func NewFound(raw []byte, count func()) Found { return Found{Raw: raw, count: count} }

// Count counts what the Peek found in the cache's Stats and as an Event,
// as cache.Get would have: the first call does, later ones do nothing, as
// does a Peek that failed.
func (f *Found) Count() {
	if c := f.count; c != nil {
		f.count = nil
		c()
	}
}

// Unmarshaler decodes a value: a cache.Codec is one.
type Unmarshaler interface {
	Unmarshal(b []byte, v any) error
}

// Dst is where View.Peek puts the value it answers with. *Into[V] is the
// Dst for a V.
type Dst interface {
	// Decode decodes payload with u into the destination, from its zero
	// value. On error the destination holds its zero value.
	Decode(u Unmarshaler, payload []byte) error
	// Reuse takes v, a value decoded by an earlier read that the cache
	// kept (its near cache does), and reports true, if v has the
	// destination's type.
	Reuse(v any) bool
	// Value returns the destination's value, for the cache to keep for
	// Reuse (and to name its type in errors).
	Value() any
}

// Into is the Dst for a V: V holds the value decoded. Its zero value is
// ready to use.
type Into[V any] struct{ V V }

// Decode implements Dst.
func (t *Into[V]) Decode(u Unmarshaler, payload []byte) error {
	var zero V
	t.V = zero
	if err := u.Unmarshal(payload, &t.V); err != nil {
		t.V = zero
		return err
	}
	return nil
}

// Reuse implements Dst.
func (t *Into[V]) Reuse(v any) bool {
	x, ok := v.(V)
	if ok {
		t.V = x
	}
	return ok
}

// Value implements Dst.
func (t *Into[V]) Value() any { return t.V }
