// Package peek lets package middleware take a first look at an entry with
// cache.Get without Get counting what it found in the cache's Stats, and
// count it once the middleware answers with it; and write an entry with
// cache.Set only if the key still holds what such a look found. The middleware looks with
// Get first and, unless that look answers the request, asks GetOrLoad,
// which counts what it finds: counting both would count most requests
// twice.
package peek

import (
	"context"
	"errors"
)

type ctxKey struct{ name string }

var probeKey = &ctxKey{"peek-probe"}

// Probe holds the counting of what one cache.Get found. It is not safe for
// concurrent use: one request's goroutine makes the Get and calls Count.
type Probe struct {
	count  func()
	stored []byte
}

// With returns ctx carrying p: a cache.Get on it leaves its counting to
// p.Count.
func With(ctx context.Context, p *Probe) context.Context {
	return context.WithValue(ctx, probeKey, p)
}

// From returns the Probe ctx carries, or nil.
func From(ctx context.Context) *Probe {
	p, _ := ctx.Value(probeKey).(*Probe)
	return p
}

// Defer records count as the counting of what Get found, for Count.
func (p *Probe) Defer(count func()) { p.count = count }

// Count counts what Get found, once; it does nothing if Get found nothing
// to count (it failed) or Count was called already.
func (p *Probe) Count() {
	if f := p.count; f != nil {
		p.count = nil
		f()
	}
}

// Stored is the entry, as stored, that the Get with p found (a value,
// stale or fresh); nil if it found none. It is shared: read it only.
func (p *Probe) Stored() []byte { return p.stored }

// Found records raw, the stored entry Get found, for Stored.
func (p *Probe) Found(raw []byte) { p.stored = raw }

var expectKey = &ctxKey{"peek-expect"}

// ErrChanged is what cache.Set returns on a context from Expect when the
// key no longer holds the entry expected: nothing was written.
var ErrChanged = errors.New("cache: the key changed since it was read")

// Expect returns ctx carrying old, an entry as Probe.Stored returned it: a
// cache.Set on it writes only if the key still holds old, in one
// conditional write on the server, and returns ErrChanged otherwise.
func Expect(ctx context.Context, old []byte) context.Context {
	return context.WithValue(ctx, expectKey, old)
}

// Expected returns the entry ctx expects (see Expect); ok is false if it
// expects none.
func Expected(ctx context.Context) (old []byte, ok bool) {
	old, ok = ctx.Value(expectKey).([]byte)
	return old, ok && old != nil
}
