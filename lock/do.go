package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
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
// The lock is refreshed to ttl every ttl/3, or as WithRefreshEvery says.
// If it is lost (the key was taken or deleted) or cannot be refreshed
// before it would expire, fn's context is cancelled at once with a cause
// matching ErrLost (read it with context.Cause), and Do's error matches
// ErrLost too. fn should stop when its context ends; Do does not return
// before fn does.
//
// A lock held by someone else returns ErrNotObtained without running fn,
// unless WithRetry asks to wait. A ctx that ends before the lock is
// obtained returns errors.Join(ErrNotObtained, ctx.Err()), also without
// running fn.
//
// Its options are those of Obtain (WithRetry, WithMaxWait, WithMetadata,
// WithFencing) and WithRefreshEvery.
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(context.Context) error, opts ...Option) error {
	s, err := gather("Do", doAccepts, opts)
	if err != nil {
		return err
	}
	if fn == nil {
		return invalid("nil fn for key %q", key)
	}
	every := s.refreshEvery
	if every == 0 {
		every = ttl / 3
	}
	if ttl >= time.Millisecond && (every < time.Millisecond || every >= ttl) {
		return invalid("RefreshEvery %v must be at least 1ms and below the ttl %v", every, ttl)
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
	work, stop := l.keepAliveFrom(context.WithValue(ctx, lockKey, l), ttl, every, obtained)
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
// interval is 0) until stop is called. The returned context is derived
// from ctx and is cancelled, with a cause matching ErrLost, as soon as the
// lock is lost or could not be refreshed before it would expire. stop ends
// the refreshing, waits for it to finish, cancels the context and returns
// its cause (nil if the lock was never lost); it does not release l.
//
// Each refresh is reported to Options.Observer as EventRefreshed or
// EventRefreshFailed, and a loss as EventLost, from the keep-alive's own
// goroutine; a loss and failed refreshes are logged at Warn.
func (l *Lock) KeepAlive(ctx context.Context, ttl, interval time.Duration) (held context.Context, stop func() error) {
	if interval <= 0 || interval >= ttl {
		interval = max(ttl/3, time.Millisecond)
	}
	// The lock was refreshed or obtained at least this recently only if the
	// caller just did so; measuring from now would overestimate, so the
	// first deadline is one interval earlier than it could be.
	return l.keepAliveFrom(ctx, ttl, interval, time.Now().Add(-interval))
}

func (l *Lock) keepAliveFrom(ctx context.Context, ttl, every time.Duration, obtained time.Time) (context.Context, func() error) {
	work, cancel := context.WithCancelCause(ctx)
	quit, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		l.keepAlive(cancel, ttl, every, obtained.Add(ttl), quit)
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

// keepAlive refreshes l every interval until stop closes. validUntil is
// when the lock expires if no refresh succeeds; it is measured from before
// each refresh was sent, so it never overestimates. Work is cancelled a
// margin before that moment, while the lock is still held, even if a
// refresh is still waiting for its answer then: a client need not honour
// the refresh's deadline (go-redis ignores context deadlines unless
// ContextTimeoutEnabled is set and waits out its own ReadTimeout).
func (l *Lock) keepAlive(cancel context.CancelCauseFunc, ttl, every time.Duration, validUntil time.Time, stop <-chan struct{}) {
	margin := min(ttl/10, 100*time.Millisecond)
	expiring := time.NewTimer(time.Until(validUntil.Add(-margin))) // fires at the cutoff
	defer expiring.Stop()
	timer := time.NewTimer(every)
	defer timer.Stop()
	var (
		sent   time.Time
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
			l.c.emitOwned(EventRefreshFailed, l.key, time.Since(l.sent), refreshErr)
		}
		l.lost(context.Background(), cause, true)
	}
	for {
		select {
		case <-stop:
			return
		case <-expiring.C:
			lose(fmt.Errorf("%w: could not refresh %q before it expires", ErrLost, l.key), nil)
			return
		case <-timer.C:
			sent = time.Now()
			cutoff := validUntil.Add(-margin)
			result = make(chan error, 1)
			go func(result chan<- error) {
				ctx, done := context.WithDeadline(context.Background(), cutoff)
				defer done()
				result <- l.extend(ctx, ttl) // reported below, not on this goroutine
			}(result)
		case err := <-result:
			result = nil
			switch {
			case err == nil:
				validUntil = sent.Add(ttl)
				expiring.Reset(time.Until(validUntil.Add(-margin)))
				timer.Reset(every)
				l.c.emitOwned(EventRefreshed, l.key, time.Since(l.sent), nil)
			case errors.Is(err, ErrNotHeld):
				lose(fmt.Errorf("%w: %q was taken or deleted by someone else", ErrLost, l.key), err)
				return
			default:
				// A transient failure: try again soon; expiring ends the
				// attempts at the cutoff.
				timer.Reset(max(time.Millisecond, min(every/4, time.Until(validUntil.Add(-margin)))))
				l.c.log(slog.LevelWarn, "refresh failed; retrying until the lock would expire", "key", l.key, "err", err)
				l.c.emitOwned(EventRefreshFailed, l.key, time.Since(l.sent), err)
			}
		}
	}
}
