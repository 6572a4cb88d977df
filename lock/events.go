package lock

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
)

// EventKind says what an Event reports.
type EventKind uint8

const (
	EventObtained      EventKind = iota + 1 // Obtain took the lock; Duration is the time it took, retries included
	EventNotObtained                        // the lock was held elsewhere until Obtain gave up, or ctx ended; Err matches ErrNotObtained
	EventObtainFailed                       // a server call of Obtain failed (refused by the ACL: Err matches ErrPermission)
	EventReleased                           // Release deleted the lock
	EventReleaseFailed                      // Release found the lock expired or taken (Err matches ErrNotHeld), or its server call failed
	EventRefreshed                          // Refresh, or a keep-alive, extended the lock
	EventRefreshFailed                      // a refresh found the lock expired or taken (Err matches ErrNotHeld), or its server call failed
	EventLost                               // Do, RunOnce or KeepAlive lost the lock while the work ran; Err matches ErrLost
	EventSkipped                            // RunOnce did not run its job: another instance holds the lock
	EventWoken                              // a waiting Obtain was woken by the release that handed it the lock; reported before its EventObtained
	EventWakeMissed                         // a waiting Obtain found by its poll that the lock had been handed to it: the release's notification was lost, late or refused
)

var eventNames = [...]string{"", "obtained", "not-obtained", "obtain-failed", "released", "release-failed",
	"refreshed", "refresh-failed", "lost", "skipped", "woken", "wake-missed"}

// String returns the kind's name in lower case, e.g. "not-obtained", or
// "unknown".
func (k EventKind) String() string {
	if int(k) < len(eventNames) && k > 0 {
		return eventNames[k]
	}
	return "unknown"
}

// Event is what Options.Observer receives: enough to feed a metrics system
// without the lock importing one. Its shape is shared by packages cache
// (cache.Event) and middleware (middleware.Event), so that one metrics
// adapter fits all three: Kind (whose String is a lower-case label),
// Duration, Err and Context mean the same in each, Key the same as in
// cache (middleware.Event has a Route instead, and a Reason, which lock's
// kinds make unnecessary). For a lock:
//
//   - Key is the lock's key. A Semaphore's permits report the same kinds
//     as a lock (Acquire and TryAcquire as Obtain, a Permit's Release,
//     Refresh and KeepAlive as a Lock's), with the semaphore's key.
//   - Duration is, for EventObtained, EventNotObtained and
//     EventObtainFailed, the time Obtain spent, retries included; for events
//     about a lock that was obtained, the time since it was obtained (so
//     EventReleased carries how long the lock was held); 0 for EventSkipped.
//   - Err is nil for EventObtained, EventReleased, EventRefreshed and
//     EventSkipped, and otherwise says why: ErrNotObtained (joined with the
//     context's error when ctx ended), ErrNotHeld, ErrLost, or the server's
//     error (matching ErrPermission when its ACL refused a command).
//   - Context is the context of the call the event belongs to, never nil:
//     Obtain's ctx for the events of an Obtain (of Do's and RunOnce's
//     too), Release's and Refresh's for theirs, and for EventSkipped
//     RunOnce's; the events of a keep-alive (Do's, KeepAlive's), which
//     runs on a goroutine of this package, carry context.Background().
//     It is for reading values, such as the trace a span is a child of,
//     not for cancellation: it may be done by the time the Observer
//     runs. The Observer must not keep it once it returns.
//
// Obtain, Release and Refresh each report one event per call, except that
// an Obtain that was handed the lock while it waited reports EventWoken or
// EventWakeMissed (Duration: the time it had spent, as for EventObtained)
// before its EventObtained. Do and
// RunOnce report the events of the Obtain, Refresh and Release they make,
// and add EventLost (once per loss) and EventSkipped; Do's keep-alive and
// KeepAlive report one EventRefreshed or EventRefreshFailed per refresh.
// Arguments rejected with ErrInvalid report nothing.
type Event struct {
	Kind     EventKind
	Key      string // the lock's key (a semaphore's, for its permits)
	Duration time.Duration
	Err      error
	Context  context.Context // of the call the event belongs to (see above); never nil
}

// emit reports an event of the call whose context is ctx to the
// Observer, on the caller's goroutine; a panic in the Observer reaches
// the caller, as in package cache.
func (c *Client) emit(ctx context.Context, kind EventKind, key string, d time.Duration, err error) {
	if c.observer != nil {
		c.observer(Event{Kind: kind, Key: key, Duration: d, Err: err, Context: ctx})
	}
}

// emitOwned is emit on a goroutine this package owns (the keep-alive),
// where nobody could receive a panic: one in the Observer is recovered and
// logged, and the keep-alive goes on.
func (c *Client) emitOwned(kind EventKind, key string, d time.Duration, err error) {
	if c.observer == nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			c.log(slog.LevelError, "Observer panicked", "key", key, "event", kind.String(), "panic", fmt.Sprint(r))
		}
	}()
	c.emit(context.Background(), kind, key, d, err) // no caller's context reaches the keep-alive
}

func (c *Client) log(level slog.Level, msg string, args ...any) {
	if c.logger != nil {
		c.logger.Log(context.Background(), level, "lock: "+msg, args...)
	}
}

// serverError logs err, the failure of a server call op on key, at Warn
// as package cache does, unless the call ended because its caller's ctx
// did: that says nothing about the server. On a Cluster a transport error
// makes the client reload its slot map (redisx.Conn.ReloadSlots), so that it
// follows a replica promoted in place of a dead master.
func (c *Client) serverError(ctx context.Context, op, key string, err error) {
	if !redisx.CallerDone(ctx) {
		c.conn.ReloadSlots(err)
		c.log(slog.LevelWarn, "server call failed", "op", op, "key", key, "err", err)
	}
}

// lost reports the loss of l, described by err (matching ErrLost): an
// EventLost and a warning. owned says whether the caller's goroutine is
// one this package owns; ctx is the caller's otherwise.
func (l *Lock) lost(ctx context.Context, err error, owned bool) {
	d := time.Since(l.sent)
	l.c.log(slog.LevelWarn, "lock lost while its work ran", "key", l.key, "held", d, "err", err)
	if owned {
		l.c.emitOwned(EventLost, l.key, d, err)
	} else {
		l.c.emit(ctx, EventLost, l.key, d, err)
	}
}
