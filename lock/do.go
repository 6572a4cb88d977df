package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hotkv/stampede/internal/failpoint"
)

// releaseTimeout bounds the release that follows the work, which runs on a
// context of its own so that a cancelled caller still frees the lock.
const releaseTimeout = 5 * time.Second

type ctxKey struct{ name string }

var lockKey = &ctxKey{"lock"}

// FromContext returns the Lock held by the Do or RunOnce call whose work
// received ctx, e.g. to read its Fence; nil outside such work.
func FromContext(ctx context.Context) *Lock {
	l, _ := ctx.Value(lockKey).(*Lock)
	return l
}

// Do obtains the lock on key, runs fn while keeping the lock alive, and
// releases it when fn returns, also when fn panics (the panic then goes on).
//
// The lock is refreshed to ttl every ttl/3, or as WithRefreshEvery says,
// counted from the send of the previous refresh (the first from the
// attempt that obtained the lock), not from its answer; one refresh is in
// flight at a time, so a refresh answered later than that is followed at
// once by the next. If the lock is lost (a refresh finds the key taken or
// deleted) or no refresh has succeeded in time (a margin, a tenth of ttl
// and at most 100ms, before the lock would expire, counting from the send
// of the last refresh that succeeded), fn's context is cancelled at once
// with a cause matching ErrLost (read it with context.Cause), and Do's
// error matches ErrLost too. A refresh that fails otherwise (a timeout, a
// broken connection) is tried again a quarter of the interval after it
// was sent. fn should stop when its context ends; Do does not return
// before fn does.
//
// A lock held by someone else returns ErrNotObtained without running fn,
// unless WithRetry asks to wait. A ctx that ends before the lock is
// obtained returns errors.Join(ErrNotObtained, ctx.Err()), also without
// running fn.
//
// Its options are those of Obtain (WithRetry, WithMaxWait, WithMetadata,
// WithFencing) and WithRefreshEvery.
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(context.Context) error, opts ...DoOption) error {
	s := doSettings(opts)
	if fn == nil {
		return invalid("Do fn for key %q is nil", key)
	}
	every := s.refreshEvery
	switch {
	case ttl < time.Millisecond:
		// obtainWith says so
	case every == 0 && ttl/3 < time.Millisecond:
		return invalid("ttl %v for key %q is below 3ms, so its default refresh interval, ttl/3, is below 1ms: set WithRefreshEvery", ttl, key)
	case every == 0:
		every = ttl / 3
	case every < time.Millisecond || every >= ttl:
		return invalid("WithRefreshEvery %v for key %q must be at least 1ms and below ttl %v", every, key, ttl)
	}
	l, err := c.obtainWith(ctx, key, ttl, s)
	if err != nil {
		return err
	}
	// Measured from the attempt that obtained the lock, not from the first
	// one: a Do that waited for the lock holds it for a full ttl.
	return l.hold(ctx, ttl, every, l.sent, fn)
}

// hold runs fn under l with a keep-alive, then releases l.
func (l *Lock) hold(ctx context.Context, ttl, every time.Duration, obtained time.Time, fn func(context.Context) error) (err error) {
	work, stop := keepAliveFrom(context.WithValue(ctx, lockKey, l), l, ttl, every, obtained)
	defer func() {
		cause := stop()
		lost := errors.Is(cause, ErrLost)

		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		rerr := l.release(rctx, false) // a lock not held is reported below, as lost
		rcancel()

		var expired error
		if !lost && errors.Is(rerr, ErrNotHeld) {
			expired = fmt.Errorf("%w: %q expired before release", ErrLost, l.key)
			l.lost(ctx, expired, false)
		}
		if r := recover(); r != nil {
			panic(r)
		}
		switch {
		case lost:
			err = errors.Join(cause, err)
		case expired != nil:
			err = errors.Join(expired, err)
		case rerr != nil:
			err = errors.Join(err, rerr)
		}
	}()
	return fn(work)
}

// KeepAlive refreshes l back to ttl every interval (a third of ttl when
// interval is 0) until stop is called. Each refresh is due interval after
// the send of the previous one, not after its answer; one refresh is in
// flight at a time, so a refresh answered later than that is followed at
// once by the next. The first is due interval after l was obtained, or at
// once if that has passed: KeepAlive takes l to have been set to expire
// ttl from its obtain, or from a refresh made at most interval ago.
//
// The returned context is derived from ctx and is cancelled, with a cause
// matching ErrLost, as soon as a refresh finds the lock taken or deleted,
// or when no refresh has succeeded in time: a margin (a tenth of ttl, at
// most 100ms) before the lock would expire, counting from the send of the
// last refresh that succeeded, even while a refresh still waits for its
// answer. A refresh that fails otherwise (a timeout, a broken connection)
// is tried again a quarter of interval after it was sent. stop ends the
// refreshing, waits for it to finish, cancels the context and returns its
// cause (nil if the lock was never lost); it does not release l.
//
// Each refresh is reported to Options.Observer as EventRefreshed or
// EventRefreshFailed, and a loss as EventLost, from the keep-alive's own
// goroutine; a loss and failed refreshes are logged at Warn.
func (l *Lock) KeepAlive(ctx context.Context, ttl, interval time.Duration) (held context.Context, stop func() error) {
	if interval <= 0 || interval >= ttl {
		interval = max(ttl/3, time.Millisecond)
	}
	// A refresh the caller made since the obtain is unknown here; one at
	// most interval ago is assumed, never a later one, so that the first
	// deadline does not overestimate. A lock obtained more recently than
	// that is measured from its obtain: a KeepAlive called right after
	// Obtain refreshes interval after the obtain was sent, not at once.
	return keepAliveFrom(ctx, l, ttl, interval, assumedSet(l.sent, interval))
}

// assumedSet is when a lock or permit obtained at sent, which a caller asks
// to keep alive every interval, was last set to expire a full TTL later,
// as KeepAlive assumes it (see there).
func assumedSet(sent time.Time, interval time.Duration) time.Time {
	set := time.Now().Add(-interval)
	if sent.After(set) {
		set = sent
	}
	return set
}

// keeper is what a keep-alive keeps: a Lock or a semaphore's Permit.
type keeper interface {
	// keptBy returns the Client, the key (the lock's, the semaphore's)
	// and when the acquisition was sent.
	keptBy() (c *Client, key string, sent time.Time)
	// extend refreshes it to ttl, reporting nothing; ErrNotHeld when it
	// is not held any more.
	extend(ctx context.Context, ttl time.Duration) error
	// lost reports its loss (see Lock.lost).
	lost(ctx context.Context, err error, owned bool)
}

func (l *Lock) keptBy() (*Client, string, time.Time) { return l.c, l.key, l.sent }

// keepAliveFrom starts the keep-alive of h, last set to expire ttl from
// set (when that refresh or obtain was sent).
func keepAliveFrom(ctx context.Context, h keeper, ttl, every time.Duration, set time.Time) (context.Context, func() error) {
	work, cancel := context.WithCancelCause(ctx)
	quit, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		keepAlive(ctx, h, cancel, ttl, every, set, quit)
	}()
	return work, func() error {
		select {
		case <-quit:
		default:
			close(quit)
		}
		<-stopped
		var cause error
		if errors.Is(context.Cause(work), ErrLost) {
			cause = context.Cause(work)
		}
		cancel(context.Canceled)
		return cause
	}
}

// keepAlive refreshes h until stop closes, each refresh due every after
// the send of the last one that succeeded (set: the obtain, or the refresh
// the caller made), not after its answer: timed from the answers, a round
// trip as long as a third of ttl would put each refresh a round trip
// later, and the lock would be declared lost while the server still held
// it. One refresh is in flight at a time; an answer that comes
// after the next refresh was due sends that one at once.
//
// validUntil is when the lock expires if no refresh succeeds; it is
// measured from before each refresh was sent, so it never overestimates.
// Work is cancelled a margin before that moment, while the lock is still
// held, even if a refresh is still waiting for its answer then: a client
// need not honour the refresh's deadline (go-redis ignores context
// deadlines unless ContextTimeoutEnabled is set and waits out its own
// ReadTimeout).
//
// ctx is the keep-alive's caller's, for its values only (the failpoint's):
// the refreshes run on contexts of their own, bounded by the cutoff.
func keepAlive(ctx context.Context, h keeper, cancel context.CancelCauseFunc, ttl, every time.Duration, set time.Time, stop <-chan struct{}) {
	c, key, obtained := h.keptBy()
	margin := min(ttl/10, 100*time.Millisecond)
	validUntil := set.Add(ttl)
	expiring := time.NewTimer(time.Until(validUntil.Add(-margin))) // fires at the cutoff
	defer expiring.Stop()
	timer := time.NewTimer(time.Until(set.Add(every))) // the next refresh is due; at once if past
	defer timer.Stop()
	var (
		sent   time.Time  // when the refresh in flight, or the last one, was sent
		result chan error // the refresh in flight; nil when none is
	)
	defer func() {
		if result != nil {
			<-result // no refresh outlives the keep-alive
		}
	}()
	// lose cancels the work first, whatever the Observer does, then
	// reports the refresh that failed, if one did, and the loss.
	lose := func(cause, refreshErr error) {
		cancel(cause)
		if refreshErr != nil {
			c.emitOwned(EventRefreshFailed, key, time.Since(obtained), refreshErr)
		}
		h.lost(context.Background(), cause, true)
	}
	for {
		select {
		case <-stop:
			return
		case <-expiring.C:
			lose(fmt.Errorf("%w: could not refresh %q before it expires", ErrLost, key), nil)
			return
		case <-timer.C:
			cutoff := validUntil.Add(-margin)
			if !time.Now().Before(cutoff) {
				continue // too late to help: expiring fires now
			}
			sent = time.Now()
			result = make(chan error, 1)
			go func(result chan<- error) {
				failpoint.Inject(ctx, failpoint.LockRefresh)
				ctx, done := context.WithDeadline(context.Background(), cutoff)
				defer done()
				result <- h.extend(ctx, ttl) // reported below, not on this goroutine
			}(result)
		case err := <-result:
			result = nil
			switch {
			case err == nil:
				validUntil = sent.Add(ttl)
				expiring.Reset(time.Until(validUntil.Add(-margin)))
				timer.Reset(time.Until(sent.Add(every)))
				c.emitOwned(EventRefreshed, key, time.Since(obtained), nil)
			case errors.Is(err, ErrNotHeld):
				lose(fmt.Errorf("%w: %q was taken or deleted by someone else", ErrLost, key), err)
				return
			default:
				// A transient failure: try again soon, timed from this
				// attempt's send too (at once after one that hung);
				// expiring ends the attempts at the cutoff.
				timer.Reset(time.Until(sent.Add(every / 4)))
				c.log(slog.LevelWarn, "refresh failed; retrying until it would expire", "key", key, "err", err)
				c.emitOwned(EventRefreshFailed, key, time.Since(obtained), err)
			}
		}
	}
}
