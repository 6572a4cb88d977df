package cache

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/internal/striped"
	"github.com/hotkv/stampede/loader"
)

// Stats counts what a Cache has done since New.
//
// Hits, StaleHits and Misses count what the calls of Get and GetOrLoad
// found, one per call (each caller that joins a load is a miss); a call
// that fails before it reads a value counts in none of them. Package
// middleware looks (as Get does) before it asks GetOrLoad, yet counts once
// per request: a HIT or STALE answered from the stored response is a hit or a
// stale hit, a request that renders, or waits for another's render (its
// X-Cache then says HIT), is a miss; a render a client forced with
// no-cache (middleware.Options.AllowNoCache) counts in none of them.
// Hits and stale hits answered by the near cache (Options.Near) count in
// Hits or StaleHits and in NearHits.
//
// Served counts the callers that a load answered, rather than a stored
// value, one per call of GetOrLoad (and per key of GetOrLoadMany) that
// was answered by a load's outcome (a value, a not-found or the load's
// error): the call whose flight ran the loader (counted as the load ends,
// even if that call stopped waiting for it), those that joined that
// flight (Coalesced) and took its outcome, and those whose flight waited
// for another process's load (Waits) and took its outcome, announced or
// read from the key. Each is counted in its own process, so Stats summed
// over the processes sharing the server (Add) counts each caller once,
// and Served/Loads is the fleet's callers per load; a load answers at
// least the call that ran it, except a background refresh, which answers
// none (its readers are the StaleHits served meanwhile). A call that gave
// up first (its ctx, WaitTimeout), or was answered by a value stored
// before it came, is not counted. Counting costs an atomic add per call
// answered by a load, none on a hit.
type Stats struct {
	Hits           uint64 // fresh values served
	StaleHits      uint64 // stale values served while one process refreshes
	Misses         uint64 // calls that found no usable value
	Loads          uint64 // loader calls made by this Cache
	LoadErrors     uint64 // loader calls that failed (not found excluded)
	Coalesced      uint64 // calls that joined a load or wait already running in this process
	Served         uint64 // calls answered by a load (this process's or one waited for), not a stored value
	Waits          uint64 // flights that waited for another process's load
	WaitTimeouts   uint64 // of those, the ones that gave up after WaitTimeout
	LockContention uint64 // rebuild locks found held by another process
	FailOpenLoads  uint64 // loads run without the server because it was unreachable
	DecodeFailures uint64 // stored entries that could not be decoded (replaced)
	Refreshes      uint64 // background refreshes started (stale or early)
	WritesSkipped  uint64 // rebuilt values not written because a Delete or Set came first
	ServerErrors   uint64 // failed server calls
	AnnounceDenied uint64 // SUBSCRIBEs and PUBLISHes of announcements the server refused (ACL): waiters poll instead
	BackendWaits   uint64 // loads that found their backend's permits all held and waited for one (Options.Backends)

	// The near cache (Options.Near).
	NearHits          uint64 // of Hits and StaleHits, those answered from the near cache
	NearInvalidations uint64 // entries dropped because their key changed (told by the server, or written here)
	NearFlushes       uint64 // times the near cache was emptied: tracking lost, lapsed, or nodes changed
	NearEntries       uint64 // entries in the near cache now (otter's estimate), not a count since New
}

// Add returns the sum of s and o, field by field: for totals over the
// Caches of several processes or namespaces.
func (s Stats) Add(o Stats) Stats {
	s.Hits += o.Hits
	s.StaleHits += o.StaleHits
	s.Misses += o.Misses
	s.Loads += o.Loads
	s.LoadErrors += o.LoadErrors
	s.Coalesced += o.Coalesced
	s.Served += o.Served
	s.Waits += o.Waits
	s.WaitTimeouts += o.WaitTimeouts
	s.LockContention += o.LockContention
	s.FailOpenLoads += o.FailOpenLoads
	s.DecodeFailures += o.DecodeFailures
	s.Refreshes += o.Refreshes
	s.WritesSkipped += o.WritesSkipped
	s.ServerErrors += o.ServerErrors
	s.AnnounceDenied += o.AnnounceDenied
	s.BackendWaits += o.BackendWaits
	s.NearHits += o.NearHits
	s.NearInvalidations += o.NearInvalidations
	s.NearFlushes += o.NearFlushes
	s.NearEntries += o.NearEntries
	return s
}

type counters struct {
	// Counted on every hit, from every core, hence striped over cache
	// lines. A near hit counts once, in nearFresh or nearStale; Stats
	// adds them to Hits and StaleHits.
	hits, staleHits, nearFresh, nearStale striped.Counter
	misses, loads, loadErrors, coalesced, served, waits, waitTimeouts,
	contention, failOpen, decodeFailures, refreshes, writesSkipped, serverErrors, announceDenied, backendWaits atomic.Uint64
}

// Stats returns a snapshot of the counters.
func (c *Cache) Stats() Stats {
	n := &c.n
	var invals, flushes, entries uint64
	if c.near != nil {
		invals, flushes = c.near.invalidations.Load(), c.near.flushes.Load()
		entries = uint64(max(c.near.store.EstimatedSize(), 0))
	}
	nf, ns := n.nearFresh.Load(), n.nearStale.Load()
	return Stats{
		Hits: n.hits.Load() + nf, StaleHits: n.staleHits.Load() + ns, Misses: n.misses.Load(), Loads: n.loads.Load(),
		LoadErrors: n.loadErrors.Load(), Coalesced: n.coalesced.Load(), Served: n.served.Load(), Waits: n.waits.Load(),
		WaitTimeouts: n.waitTimeouts.Load(), LockContention: n.contention.Load(), FailOpenLoads: n.failOpen.Load(),
		DecodeFailures: n.decodeFailures.Load(), Refreshes: n.refreshes.Load(), WritesSkipped: n.writesSkipped.Load(),
		ServerErrors: n.serverErrors.Load(), AnnounceDenied: n.announceDenied.Load(), BackendWaits: n.backendWaits.Load(),
		NearHits: nf + ns, NearInvalidations: invals, NearFlushes: flushes, NearEntries: entries,
	}
}

// EventKind says what an Event reports.
type EventKind uint8

const (
	EventHit           EventKind = iota + 1 // fresh value served
	EventStale                              // stale value served
	EventMiss                               // no usable value
	EventLoad                               // loader returned; Duration is its run time, Err its error
	EventWait                               // waited for another process; Duration is the wait, Err set on timeout or remote failure
	EventFailOpen                           // loader ran without the server
	EventDecodeFailure                      // a stored entry could not be decoded; Err says why
	EventRefresh                            // background refresh started
	EventWriteSkipped                       // a rebuilt value was not written: a Delete or Set came first
	EventServerError                        // a server call failed; Err says why
	EventServed                             // a load of this process answered its callers; Callers says how many, Err the load's error
)

var eventNames = [...]string{"", "hit", "stale", "miss", "load", "wait", "fail-open", "decode-failure", "refresh", "write-skipped", "server-error", "served"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k > 0 {
		return eventNames[k]
	}
	return "unknown"
}

// Event is what Options.Observer receives: enough to feed a metrics system
// or a tracer without the cache importing one.
type Event struct {
	Kind     EventKind
	Key      string // the caller's key
	Duration time.Duration
	Err      error
	Near     bool // a hit or stale hit answered from the near cache (Options.Near)
	// Callers is, for EventServed, how many calls of this process the
	// load answered: one EventServed per load (per key of a batch load),
	// when its flight ends, before any of those calls returns. For a load
	// after a miss (or in place of a value nobody could use), the call
	// that ran it (whether or not it still waits) and those that joined
	// its flight, less those whose own ctx ended first; for a background
	// refresh, the stale values of the key this process served
	// while it ran (counting the one that started it). Zero for other
	// kinds.
	//
	// Callers in other processes that waited for the load are not in it:
	// each knows which load answered it, but telling the loader would
	// cost a server round trip per waiter. They count in Stats.Served of
	// their own process (stale values they served meanwhile, in
	// StaleHits), which is where fleet totals come from (see Stats).
	Callers int
	// Context is the context of the call the event belongs to, never nil:
	// for a hit, stale hit or miss the caller's; for EventLoad the very
	// context the loader was called with (it keeps the values of the
	// first caller's context, see GetOrLoad), and for EventFailOpen and
	// EventWait the context of the flight that loaded or waited (the
	// same values); for a background refresh (its EventRefresh and
	// EventLoad) the refresh's, which keeps the values of the call that
	// found the value stale. Events that no call's context reaches
	// (EventServerError, EventWriteSkipped, EventServed, a decode failure
	// met while decoding a loaded value) carry context.Background().
	//
	// It is for reading values, such as the trace a span is a child of,
	// not for cancellation: it may be done by the time the Observer runs.
	//
	// NOTE: the Observer must not keep it once it returns.
	Context context.Context
}

// emit records an event of the call whose context is ctx.
func (c *Cache) emit(ctx context.Context, kind EventKind, key string, d time.Duration, err error) {
	c.record(Event{Kind: kind, Key: key, Duration: d, Err: err, Context: ctx})
}

// record counts e in Stats and hands it to the Observer. count is the one
// place where what happened (the event's kind, and its error) decides
// which counter moves. Counters that move before their event is known (Loads
// when a loader starts, Waits when a wait starts, so that a caller can
// watch them during the run) and those with no event (Coalesced,
// LockContention, AnnounceDenied) are counted where it happens.
func (c *Cache) record(e Event) {
	c.count(e.Kind, e.Near, e.Err)
	c.tell(e)
}

// count moves the counter of an event of kind (answered from the near
// cache: near; failed with err), for record and for report's verdicts.
func (c *Cache) count(kind EventKind, near bool, err error) {
	switch kind {
	case EventHit:
		if near {
			c.n.nearFresh.Inc()
		} else {
			c.n.hits.Inc()
		}
	case EventStale:
		if near {
			c.n.nearStale.Inc()
		} else {
			c.n.staleHits.Inc()
		}
	case EventMiss:
		c.n.misses.Add(1)
	case EventLoad:
		if err != nil && !errors.Is(err, loader.ErrNotFound) {
			c.n.loadErrors.Add(1)
		}
	case EventWait:
		if err == ErrWaitTimeout {
			c.n.waitTimeouts.Add(1)
		}
	case EventFailOpen:
		c.n.failOpen.Add(1)
	case EventDecodeFailure:
		c.n.decodeFailures.Add(1)
	case EventRefresh:
		c.n.refreshes.Add(1)
	case EventWriteSkipped:
		c.n.writesSkipped.Add(1)
	case EventServerError:
		c.n.serverErrors.Add(1)
	}
	// EventServed moves no counter: Served counts calls, each where it
	// takes its answer (Cache.served).
}

// served counts in Stats.Served a call (or a key of a batch) that takes
// res, the result of the flight it started or joined (shared), unless a
// stored value answered it, or its own flight's load did (led counted
// that).
func (c *Cache) served(res outcome, shared bool) {
	if res.src != fromStore && (shared || res.src != fromLoad) {
		c.n.served.Add(1)
	}
}

// led passes on the result of a flight's work, counting in Stats.Served
// the call that started the flight when its loader ran: that call is
// answered by its own load, whether or not it still waits for the
// flight's result (package middleware's request renders in its own
// goroutine, and does not).
func (c *Cache) led(res outcome, err error) (outcome, error) {
	if res.src == fromLoad {
		c.n.served.Add(1)
	}
	return res, err
}

// flightServed is the Finished of c.flights: a flight whose result this
// process's loader made reports the load's callers in this process.
func (c *Cache) flightServed(_ string, res outcome, err error, callers int) {
	if res.src == fromLoad && c.s.observer != nil {
		c.tell(Event{Kind: EventServed, Key: res.user, Err: err, Callers: callers})
	}
}

// refreshServed is the Finished of c.refreshes: a refresh that ran the
// loader (user is then the caller's key) reports the stale readers of
// this process it served meanwhile (refresh attaches them).
func (c *Cache) refreshServed(_ string, user string, err error, callers int) {
	if user != "" && c.s.observer != nil {
		c.tell(Event{Kind: EventServed, Key: user, Err: err, Callers: callers})
	}
}

// tell hands e to the Observer, counting nothing.
func (c *Cache) tell(e Event) {
	if c.s.observer != nil {
		if e.Context == nil {
			e.Context = context.Background() // never nil, as Event.Context says
		}
		c.s.observer(e)
	}
}

// trail is what one read call (GetOrLoad, Get, a key of a batch) found
// before its verdict, recorded as the call runs: report counts it once the
// verdict is known (a value or a not-found served, or a miss handed to the
// flight). The flight's own events (its load, wait, fail-open, skipped
// write, the refresh it starts) are the flight's, shared by every caller
// that joins it: they are recorded where the flight makes them.
type trail struct {
	verdict   EventKind // EventHit, EventStale or EventMiss; 0: nothing to count (a later round)
	near      bool      // the verdict was the near cache's
	decodeErr error     // a stored entry the hit path could not decode
}

// report counts the trail t of a call for key, whose context is ctx: a
// decode failure its read met, then its verdict.
//
// A hit counts in Stats and, with no Observer, builds no Event.
func (c *Cache) report(ctx context.Context, key string, t trail) {
	if t.decodeErr != nil {
		c.record(Event{Kind: EventDecodeFailure, Key: key, Err: t.decodeErr, Context: ctx})
	}
	if t.verdict != 0 {
		c.count(t.verdict, t.near, nil)
		if c.s.observer != nil {
			c.tell(Event{Kind: t.verdict, Key: key, Near: t.near, Context: ctx})
		}
	}
}

// counter returns a func that reports the verdict kind for key, for a
// look of package middleware's (on ctx) to count later (see Engine).
func (c *Cache) counter(ctx context.Context, kind EventKind, key string, near bool) func() {
	return func() { c.report(ctx, key, trail{verdict: kind, near: near}) }
}
