package obs

import (
	"sync/atomic"

	"github.com/hotkv/stampede/internal/striped"
)

// Kinds is how many EventKind values there can be (they are uint8s).
const Kinds = 256

// Tier is the tier a tiered kind's event came from, or NoTier.
type Tier uint8

const (
	NoTier Tier = iota // a kind without tiers
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

// Events counts the events of one Observer by kind and tier, to be
// reported when the metrics are collected.
//
// Counting in place keeps the metrics backend off the hot path: an atomic
// add costs a few nanoseconds, a backend's counter (label or attribute
// lookup, aggregation) often more than a near-cache hit takes. The tiered
// kinds (cache hits and stale hits) are counted in striped counters, as
// package cache counts them, so that cores counting hits at once do not
// take turns owning one cache line; other kinds are rare enough for one
// atomic each.
//
// Events is safe for concurrent use. Use NewEvents to create one.
type Events struct {
	// counts[kind] for kinds without tiers. Kind 0 counts the kinds
	// whose name is "unknown".
	counts [Kinds]atomic.Uint64
	// tiered[hot[kind]-1][0 server, 1 near] for kinds with tiers.
	tiered [2][2]striped.Counter
	hot    [Kinds]uint8
	names  [Kinds]string // set once in NewEvents; "" for kinds that do not exist
}

// NewEvents returns a table for the kinds whose String is name(k)
// ("unknown" for kinds that do not exist); tiered lists the (at most two)
// kinds counted by tier.
func NewEvents(name func(k int) string, tiered ...int) *Events {
	tb := &Events{}
	for i, k := range tiered {
		tb.hot[k] = uint8(i + 1)
	}
	tb.names[0] = "unknown"
	for k := 1; k < Kinds; k++ {
		if s := name(k); s != "unknown" {
			tb.names[k] = s
		}
	}
	return tb
}

// Count counts one event of kind k; near says it came from the near
// cache (ignored for kinds without tiers).
func (tb *Events) Count(k uint8, near bool) {
	switch {
	case tb.hot[k] != 0:
		tier := 0
		if near {
			tier = 1
		}
		tb.tiered[tb.hot[k]-1][tier].Inc()
	case k == 0 || tb.names[k] == "":
		tb.counts[0].Add(1)
	default:
		tb.counts[k].Add(1)
	}
}

// Name returns the name of kind k: its String, "unknown" for kind 0, and
// "" for the other kinds that do not exist.
func (tb *Events) Name(k int) string { return tb.names[k] }

// Each calls f with the count of every series of the table: each kind
// that exists (zeros included; the tiered kinds once per tier, the others
// with NoTier), and the unknown kinds (kind 0) only once counted.
func (tb *Events) Each(f func(k int, tier Tier, n uint64)) {
	for k := 1; k < Kinds; k++ {
		switch h := tb.hot[k]; {
		case tb.names[k] == "":
		case h != 0:
			f(k, Server, tb.tiered[h-1][0].Load())
			f(k, Near, tb.tiered[h-1][1].Load())
		default:
			f(k, NoTier, tb.counts[k].Load())
		}
	}
	if n := tb.counts[0].Load(); n > 0 {
		f(0, NoTier, n)
	}
}
