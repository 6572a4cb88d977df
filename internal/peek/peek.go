// Package peek lets package middleware take a first look at an entry with
// cache.Get without Get counting what it found in the cache's Stats, and
// count it once the middleware answers with it. The middleware looks with
// Get first and, unless that look answers the request, asks GetOrLoad,
// which counts what it finds: counting both would count most requests
// twice.
package peek

import "context"

type ctxKey struct{ name string }

var probeKey = &ctxKey{"peek-probe"}

// Probe holds the counting of what one cache.Get found. It is not safe for
// concurrent use: one request's goroutine makes the Get and calls Count.
type Probe struct {
	count func()
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
