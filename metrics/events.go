package metrics

import (
	"math"
	"sync/atomic"

	"github.com/hotkv/stampede/internal/striped"
)

// Kind is the kind of an Event: cache.EventKind, lock.EventKind or
// middleware.EventKind. Its String is a lower-case label, "unknown" for
// the values that are no kind.
type Kind interface {
	~uint8
	String() string
}

// Tier is the tier a cache Event came from (cache.Event.Near), or NoTier
// for a kind that Events does not count by tier.
type Tier uint8

// The tiers: NoTier for the kinds counted without tiers, Server and Near
// for the two tiers of a cache's hits and stale hits.
const (
	NoTier Tier = iota // a kind counted without tiers
	Server             // answered by the server
	Near               // answered by the near cache
)

// String returns the tier's label value: "", "server" or "near".
func (t Tier) String() string {
	switch t {
	case Server:
		return "server"
	case Near:
		return "near"
	}
	return ""
}

// kinds is how many values a Kind can have.
const kinds = math.MaxUint8 + 1

// Events counts the events of one Observer by kind and tier, to be
// reported when the metrics are collected.
//
// Counting in place keeps the metrics backend off the hot path: an atomic
// add costs a few nanoseconds, a backend's counter (label or attribute
// lookup, aggregation) often more than a near-cache hit takes. The kinds
// counted by tier (cache hits and stale hits) are counted in striped
// counters, as package cache counts them, so that cores counting hits at
// once do not take turns owning one cache line; other kinds are rare
// enough for one atomic each.
//
// Events is safe for concurrent use. Use NewEvents to create one.
type Events[K Kind] struct {
	// counts[kind] for kinds without tiers. Kind 0 counts the values
	// whose String is "unknown".
	counts [kinds]atomic.Uint64
	// tiered[hot[kind]-1][0 server, 1 near] for kinds with tiers.
	tiered [2][2]striped.Counter
	hot    [kinds]uint8
	known  [kinds]bool // set once in NewEvents: K(k).String() is not "unknown"
}

// NewEvents returns a table for the kinds of K; tiered lists the (at most
// two) kinds counted by tier: cache.EventHit and cache.EventStale for a
// cache, none for a lock. It panics if tiered lists more than two.
func NewEvents[K Kind](tiered ...K) *Events[K] {
	if len(tiered) > 2 {
		panic("metrics: NewEvents counts at most two kinds by tier")
	}
	tb := &Events[K]{}
	for i, k := range tiered {
		tb.hot[k] = uint8(i + 1)
	}
	for k := 1; k < kinds; k++ {
		tb.known[k] = K(k).String() != "unknown"
	}
	return tb
}

// Count counts one event of kind k; near says it came from the near
// cache (ignored for kinds without tiers). A k that is no kind is counted
// as kind 0.
func (tb *Events[K]) Count(k K, near bool) {
	switch {
	case tb.hot[k] != 0:
		tier := 0
		if near {
			tier = 1
		}
		tb.tiered[tb.hot[k]-1][tier].Inc()
	case !tb.known[k]:
		tb.counts[0].Add(1)
	default:
		tb.counts[k].Add(1)
	}
}

// Each calls f with the count of every series of the table: each kind of
// K (zeros included; the kinds counted by tier once per tier, the others
// with NoTier), then kind 0, whose String is "unknown", with the count of
// the values that are no kind, only once one was counted.
func (tb *Events[K]) Each(f func(k K, tier Tier, n uint64)) {
	for k := 1; k < kinds; k++ {
		switch h := tb.hot[k]; {
		case !tb.known[k]:
		case h != 0:
			f(K(k), Server, tb.tiered[h-1][0].Load())
			f(K(k), Near, tb.tiered[h-1][1].Load())
		default:
			f(K(k), NoTier, tb.counts[k].Load())
		}
	}
	if n := tb.counts[0].Load(); n > 0 {
		f(0, NoTier, n)
	}
}
