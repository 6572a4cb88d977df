package cache

import (
	"time"

	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/lockvalue"
)

// What a stored entry means is decided here, and only here: every read
// path (GetOrLoad, Get, GetOrLoadMany, the near tier and its fills, a
// batch that finds a key taken, a waiter's notice) asks decide and acts
// on its answer, so that a rule about fresh, stale, early refresh,
// remembered not-found, expired not-found, rebuild claim or undecodable
// entry cannot hold on one path and not on another.

// use is what a reader does with an entry.
type use uint8

const (
	useValue    use = iota // serve the value (fresh or stale)
	useNotFound            // answer loader.ErrNotFound: a remembered not-found, fresh
	useReplace             // load and replace it: an expired not-found, or an undecodable entry
	useWait                // wait for the rebuild whose claim sits where the value goes
)

// reading is what an entry means at one moment.
type reading struct {
	use     use
	e       *codec.Entry // the decoded entry (useValue, useNotFound; useReplace of a not-found); nil otherwise; never changed
	stale   bool         // past its freshness: useValue served stale, or an expired not-found
	refresh bool         // useValue: refresh in the background (stale, or an early refresh is due)
	claim   string       // useWait: the claim's token
	err     error        // useReplace of an entry this version cannot read: why
	purged  bool         // useReplace of an entry a tag invalidated (see Cache.withTags)
	// unverified: useReplace of an entry whose tags' records the server
	// failed to answer for (see Cache.withTags)
	unverified bool
}

// event is what the reading counts as, for a reader that stops at it: a
// hit, a stale hit, or a miss (the reader goes on to load or wait).
func (r reading) event() EventKind {
	switch {
	case r.use != useValue && r.use != useNotFound:
		return EventMiss
	case r.stale:
		return EventStale
	}
	return EventHit
}

// corrupt reports whether the entry could not be read at all.
func (r reading) corrupt() bool { return r.err != nil }

// noStaleGrace is how long past its FreshUntil an entry without a stale
// window still counts as fresh while the server keeps it. The server's
// expiry counts from the write's arrival, a little after FreshUntil was
// computed, and the writer's and reader's clocks differ a little; in that
// moment such an entry must be neither served as stale nor refreshed
// (a refresh would be a second load next to the reload that follows).
const noStaleGrace = time.Second

// decide says what raw, a value key's contents as read, means at now (by
// Options.Now's clock).
func (c *Cache) decide(raw []byte, now time.Time) reading {
	e, err := codec.Decode(raw)
	if err != nil {
		if claim, ok := lockvalue.Decode(string(raw)); ok && !codec.IsEntry(raw) {
			return reading{use: useWait, claim: claim.Token}
		}
		return reading{use: useReplace, err: err}
	}
	return c.decideEntry(&e, now)
}

// decideEntry is decide for an entry already decoded (the near tier's).
func (c *Cache) decideEntry(e *codec.Entry, now time.Time) reading {
	fresh := now.Before(e.FreshUntil) || e.NoStale && now.Before(e.FreshUntil.Add(noStaleGrace))
	switch {
	case e.NotFound && fresh:
		return reading{use: useNotFound, e: e}
	case e.NotFound:
		return reading{use: useReplace, e: e, stale: true}
	case !fresh:
		return reading{use: useValue, e: e, stale: true, refresh: true}
	}
	return reading{use: useValue, e: e, refresh: c.early(e, now)}
}

// early reports whether an XFetch early refresh is due at now for the
// fresh entry e. Without Expiry.EarlyRefresh (the default) it costs a
// fresh hit one comparison: this part is inlined.
func (c *Cache) early(e *codec.Entry, now time.Time) bool {
	return c.s.beta != 0 && c.xfetch(e, now)
}

// xfetch is early with Expiry.EarlyRefresh set.
func (c *Cache) xfetch(e *codec.Entry, now time.Time) bool {
	if e.LoadTime <= 0 || !now.Before(e.FreshUntil) {
		return false // past FreshUntil only a NoStale entry is fresh, and it is about to go
	}
	// Compare in float64: with a large beta the gap does not fit a
	// time.Duration, and such a conversion is implementation-defined (on
	// amd64 it comes out negative, so the refresh never happened).
	gap := float64(e.LoadTime) * c.s.beta * -logRand()
	return gap >= float64(e.FreshUntil.Sub(now))
}
