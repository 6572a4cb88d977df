package middleware

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
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
// label by, a cache key is not), Duration, Reason and Err; a field a
// package has nothing for is left out (cache.Event and lock.Event have no
// Reason: their kinds say it).
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
}

// outcome is how a request was answered, for its Event.
type outcome struct {
	kind   EventKind
	reason string
	err    error
}

// observing reports whether anybody takes Events or logs.
func (m *Middleware) observing() bool { return m.o.Observer != nil || m.o.Logger != nil }

// route returns r's Event.Route (only when observing: it allocates). A
// path never becomes a route: it may hold a secret (a reset token, a
// session in the path) and has no bound, and Event.Route is a metrics
// label.
func (m *Middleware) route(r *http.Request) string {
	if !m.observing() {
		return ""
	}
	if p := routePattern(r); p != "" {
		return p
	}
	if r.Pattern != "" {
		// net/http's ServeMux pattern, "[METHOD ][HOST]/[PATH]": without
		// the method, as chi's patterns are.
		if _, p, ok := strings.Cut(r.Pattern, " "); ok {
			return strings.TrimLeft(p, " \t")
		}
		return r.Pattern
	}
	return unknownRoute
}

// unknownRoute is Event.Route for a request no router has a pattern for
// where the middleware runs.
const unknownRoute = "unknown"

// rendered is the outcome of a request that rendered for the cache.
func rendered(res result) outcome {
	var ns errNotStored
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

// observe logs o and hands it to the Observer as an Event.
func (m *Middleware) observe(route string, d time.Duration, o outcome) {
	if l := m.o.Logger; l != nil {
		switch {
		case o.kind == EventBypass, o.kind == EventBackground && o.reason != "":
			l.Debug("middleware: not cached", "kind", o.kind.String(), "route", route, "reason", o.reason, "err", o.err)
		case o.kind == EventMiss && o.err != nil:
			l.Warn("middleware: storing a no-cache render failed", "route", route, "err", o.err)
		}
	}
	obs := m.o.Observer
	if obs == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil && m.o.Logger != nil {
			m.o.Logger.Error("middleware: Observer panicked", "panic", fmt.Sprint(v), "kind", o.kind.String(), "route", route)
		}
	}()
	obs(Event{Kind: o.kind, Route: route, Duration: d, Reason: o.reason, Err: o.err})
}
