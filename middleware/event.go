package middleware

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/hotkv/stampede/cache"
)

// EventKind says what an Event reports.
type EventKind uint8

const (
	EventHit        EventKind = iota + 1 // answered with a stored fresh response (X-Cache: HIT), also after waiting for another request's render
	EventStale                           // answered with a stored stale response (STALE) while one render refreshes it
	EventMiss                            // this request rendered the response, which the cache stores (MISS); Err is set if storing a no-cache render failed
	EventBypass                          // answered by the handler without the cache (BYPASS); Reason says why, Err is set when a shared render failed or was not awaited
	EventCanceled                        // the client went away before it was answered (nothing was written); Err is its context's error
	EventBackground                      // a render nobody waited on ended in the background (a stale refresh, or a render whose client went away); Reason says why it was not stored, if it was not
)

var eventNames = [...]string{"", "hit", "stale", "miss", "bypass", "canceled", "background"}

// String returns the kind's name in lower case ("hit", "bypass", ...), for
// metrics labels.
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k > 0 {
		return eventNames[k]
	}
	return "unknown"
}

// Event is what Options.Observer receives: one for every request the
// middleware answers, one for every render it finishes in the background.
//
// Packages cache, lock and middleware observe in one shape,
// so that one metrics adapter fits them all: Options.Logger *slog.Logger
// for what a person should read, Options.Observer func(Event) for what a
// program counts, called synchronously and outside any lock, and an Event
// with Kind (an EventKind whose String is a lower-case label), the name it
// is about (Key in cache and lock, Route here: a route is what metrics can
// label by, a cache key is not), Duration, Reason, Err and Context (the
// context of the call, for reading values such as the trace); a field a
// package has nothing for is left out (cache.Event and lock.Event have no
// Reason: their kinds say it; only this Event has Method and Status).
// cache.Stats counts the requests the middleware answers from the cache
// (HIT, STALE) as hits and stale hits, and those it renders or waits for
// as misses. The middleware recovers a panicking Observer, since its
// events come after the response was written.
type Event struct {
	Kind EventKind
	// Route is the pattern of the request's route, never its path (which
	// may hold a secret and has no bound): chi's (e.g. "/users/{id}"),
	// the one matched with r.With on a route and the one chi will route
	// the request to with r.Use on a router; or net/http's ServeMux
	// pattern without its method, where the mux routes to the middleware
	// (mux.Handle("GET /users/{id}", m.Handler(h))); otherwise "unknown"
	// (a middleware wrapped around a whole ServeMux runs before it routes,
	// a chi router without a route for the request).
	Route string
	// Duration is how long the middleware took to answer the request,
	// including a render or a wait for one, or, for EventBackground, how
	// long the render took.
	Duration time.Duration
	// Reason says why the request bypassed the cache or its response was
	// not stored (e.g. "authorization", "sets a cookie", "server error"),
	// or, for an EventMiss, "the client's no-cache" when the client's
	// Cache-Control forced the render (Options.AllowNoCache), or "not
	// stored: the cache did not write it" (Cache-Status then leaves out
	// "stored"); "" otherwise.
	Reason string
	// Err is the error behind the event, if any (see the kinds).
	Err error
	// Method is the request's method as the client sent it (for
	// EventBackground, the method of the request whose render it is).
	// It is the client's to choose, so it has no bound: a metrics label
	// maps the methods it does not know to one value (package metrics'
	// Routes does).
	Method string
	// Status is the status code of the response the client was sent: a
	// stored response's (304 for a conditional request it matches), the
	// render's, or the handler's when it bypassed the cache (200 when the
	// handler wrote nothing, as net/http then sends); for
	// EventBackground, the render's. It is 0 when no response was sent:
	// the client went away first (EventCanceled), or the handler hijacked
	// the connection.
	Status int
	// Context is the request's context, never nil; for EventBackground,
	// the context the render ran on (it keeps the values of the request
	// that caused the render). It is for reading values, such as the
	// trace a span is a child of, not for cancellation: it may be done by
	// the time the Observer runs.
	//
	// NOTE: the Observer must not keep it once it returns.
	Context context.Context
}

// outcome is how a request was answered, for its Event.
type outcome struct {
	kind   EventKind
	reason string
	err    error
	status int // Event.Status
}

// rendered is the outcome of a request that rendered for the cache.
func rendered(res result) outcome {
	var ns errNotStored
	if errors.As(res.err, new(errFailedGraceful)) {
		return outcome{kind: EventStale, reason: "the render failed (status " + strconv.Itoa(res.status) + "); served stale (Freshness.StaleIfError)"}
	}
	if errors.As(res.err, &ns) {
		return outcome{kind: EventBypass, reason: ns.reason}
	}
	if res.err != nil {
		return outcome{kind: EventBypass, reason: "the render failed", err: res.err}
	}
	if res.notStored {
		return outcome{kind: EventMiss, reason: notWritten}
	}
	return outcome{kind: EventMiss}
}

// notWritten is the Reason of an EventMiss whose render the cache did not
// write (the server failed, or the key changed meanwhile).
const notWritten = "not stored: the cache did not write it"

// unshared is the outcome of a request that found no response to share
// (the render failed, could not be stored, or took longer than
// WaitTimeout) and was handed to next.
func unshared(err error) outcome {
	var ns errNotStored
	switch {
	case errors.As(err, &ns):
		return outcome{kind: EventBypass, reason: ns.reason}
	case errors.Is(err, cache.ErrWaitTimeout), errors.Is(err, context.DeadlineExceeded):
		return outcome{kind: EventBypass, reason: "no response within WaitTimeout", err: err}
	}
	return outcome{kind: EventBypass, reason: "the shared render failed", err: err}
}
