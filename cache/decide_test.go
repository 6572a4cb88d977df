package cache

import (
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/lockvalue"
)

// TestDecide is the table of what a stored entry means: every read path
// asks decide, so this is where a rule about freshness, not-founds,
// claims and unreadable bytes is pinned down once.
func TestDecide(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	entry := func(fresh time.Duration, notFound, noStale bool) []byte {
		return codec.Append(nil, codec.Entry{
			Written: now.Add(-time.Minute), FreshUntil: now.Add(fresh), NotFound: notFound, NoStale: noStale,
			LoadTime: time.Millisecond, Payload: []byte("v"),
		})
	}
	tok := lockvalue.NewToken()
	claim := lockvalue.Encode(tok, now, "")
	for _, tc := range []struct {
		name    string
		raw     []byte
		use     use
		stale   bool
		refresh bool
		event   EventKind
	}{
		{"fresh value", entry(time.Minute, false, false), useValue, false, false, EventHit},
		{"stale value", entry(-time.Second, false, false), useValue, true, true, EventStale},
		{"no stale window, within the grace", entry(-noStaleGrace/2, false, true), useValue, false, false, EventHit},
		{"no stale window, past the grace", entry(-2*noStaleGrace, false, true), useValue, true, true, EventStale},
		{"fresh not-found", entry(time.Minute, true, false), useNotFound, false, false, EventHit},
		{"expired not-found", entry(-time.Second, true, false), useReplace, true, false, EventMiss},
		{"rebuild claim", []byte(claim), useWait, false, false, EventMiss},
		{"bytes of no entry", []byte("plain text"), useReplace, false, false, EventMiss},
		{"empty", []byte{}, useReplace, false, false, EventMiss},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &Cache{}
			rd := c.decide(tc.raw, now)
			if rd.use != tc.use || rd.stale != tc.stale || rd.refresh != tc.refresh || rd.event() != tc.event {
				t.Errorf("decide = use %d stale %v refresh %v event %v; want use %d stale %v refresh %v event %v",
					rd.use, rd.stale, rd.refresh, rd.event(), tc.use, tc.stale, tc.refresh, tc.event)
			}
			if tc.use == useWait && rd.claim != tok {
				t.Errorf("claim %q; want %q", rd.claim, tok)
			}
			if (tc.name == "bytes of no entry" || tc.name == "empty") != rd.corrupt() {
				t.Errorf("corrupt() = %v", rd.corrupt())
			}
		})
	}
}

// TestDecide_early: with Expiry.EarlyRefresh on, a fresh entry is refreshed
// early more often the closer it is to its end (XFetch), never once
// stale-free past its freshness, and never with EarlyRefresh off.
func TestDecide_early(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	at := func(left time.Duration) codec.Entry {
		return codec.Entry{FreshUntil: now.Add(left), LoadTime: 100 * time.Millisecond}
	}
	share := func(c *Cache, e codec.Entry) float64 {
		n := 0
		for range 2000 {
			if c.decideEntry(&e, now).refresh {
				n++
			}
		}
		return float64(n) / 2000
	}
	on := &Cache{s: settings{beta: 1}}
	near, far := share(on, at(50*time.Millisecond)), share(on, at(time.Second))
	// P(refresh) = exp(-left/(LoadTime*beta)): 0.61 at 50 ms, 4.5e-5 at 1 s.
	if near < 0.45 || near > 0.75 || far > 0.01 {
		t.Errorf("early refreshes: %.3f at 50 ms left, %.4f at 1 s; want about 0.61 and 0", near, far)
	}
	if got := share(&Cache{}, at(time.Millisecond)); got != 0 {
		t.Errorf("Expiry.EarlyRefresh off: %.3f of reads refresh; want 0", got)
	}
}
