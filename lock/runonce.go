package lock

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// RunOnce runs a scheduled job on at most one of the instances that call it
// for the same key at about the same time: the instance that obtains the
// lock runs fn and reports ran == true; the others skip it at once and get
// (false, nil). A ctx that ended before the lock was obtained returns false
// and errors.Join(ErrNotObtained, ctx.Err()) instead, and fn does not run:
// a caller shutting down can tell its own cancellation from another
// instance's run.
//
// maxHold is the safety net for a holder that crashes: the lock expires
// then, and fn's context is cancelled then with a cause matching ErrLost,
// since past it another instance may start the job. It is not refreshed.
// After fn the lock is kept until WithMinHold has passed since it was
// obtained, or released at once if that has already happened. A panic in fn
// releases (or holds) the lock the same way and goes on.
//
// Its options are WithMinHold, WithMetadata and WithFencing; RunOnce never
// waits for a held lock, so WithRetry and WithMaxWait do not apply.
func (c *Client) RunOnce(ctx context.Context, key string, maxHold time.Duration, fn func(context.Context) error, opts ...RunOnceOption) (ran bool, err error) {
	s := runOnceSettings(opts)
	switch {
	case fn == nil:
		return false, invalid("RunOnce fn for key %q is nil", key)
	case maxHold < time.Millisecond:
		return false, invalid("maxHold %v for key %q is below 1ms", maxHold, key)
	case s.minHold < 0 || s.minHold > maxHold:
		return false, invalid("WithMinHold %v for key %q must be between 0 and maxHold %v", s.minHold, key, maxHold)
	}
	start := time.Now()
	l, err := c.obtainWith(ctx, key, maxHold, s)
	// MinHold counts from the reply, the latest moment the server can have
	// set the key: counted from the send, a slow obtain (a server stalled
	// for as long as MinHold) would leave the key held for no time at all,
	// and an instance calling a moment later would run the job again.
	// maxHold counts from the send, the earliest: the work ends in time.
	obtained := time.Now()
	if errors.Is(err, ErrNotObtained) && !ctxEnded(err) {
		c.emit(ctx, EventSkipped, key, 0, nil)
		return false, nil // another instance holds it: it runs or ran the job
	}
	if err != nil {
		return false, err
	}

	work, cancel := context.WithDeadlineCause(context.WithValue(ctx, lockKey, l), start.Add(maxHold),
		fmt.Errorf("%w: maxHold %v passed for %q", ErrLost, maxHold, key))
	defer func() {
		var lost error // the loss, reported once to the Logger and Observer
		if cause := context.Cause(work); errors.Is(cause, ErrLost) {
			err = errors.Join(cause, err)
			lost = cause
		}
		cancel()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		var herr error
		// A lock not held is reported below, as lost.
		if rest := s.minHold - time.Since(obtained); rest >= time.Millisecond {
			herr = l.refresh(rctx, rest, false)
		} else {
			herr = l.release(rctx, false)
		}
		rcancel()
		if errors.Is(herr, ErrNotHeld) {
			if errors.Is(err, ErrLost) {
				herr = nil // already reported
			} else {
				herr = fmt.Errorf("%w: %q expired before the job ended", ErrLost, key)
				lost = herr
			}
		}
		if lost != nil {
			l.lost(ctx, lost, false)
		}
		if r := recover(); r != nil {
			panic(r)
		}
		err = errors.Join(err, herr)
	}()
	return true, fn(work)
}
