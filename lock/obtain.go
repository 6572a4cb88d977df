package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hotkv/stampede/internal/lockvalue"
	"github.com/hotkv/stampede/internal/redisx"
)

// How Obtain waits for a held lock. Each attempt is one of three steps:
//
//   - try: SET NX (or the fenced script), while not queued;
//   - poll: a queued waiter's plain GET, which finds the lock held by
//     another while its queue entry needs no refresh yet;
//   - waitStep: a queued waiter's call of the hand-off script, which takes
//     a free lock, finds the lock handed to it, or refreshes its entry.
//
// A waiter with a Retry where hand-off works joins the queue after its
// first failed attempt, without a back-off step; it then sleeps between
// attempts until its Retry's back-off passes or a release wakes it. A
// server that refuses the hand-off script puts the waiter back on try.

// obtaining is one Obtain's state across its attempts. It is used by one
// goroutine only.
type obtaining struct {
	c             *Client
	key, fenceKey string
	ttl           time.Duration
	opts          *callSettings
	start         time.Time
	deadline      time.Time // of the retries: MaxWait, ctx's deadline or start+ttl
	token, value  string

	hk     handoffKeys
	useHK  bool          // hand-off works for this key and client
	queued bool          // registered with the waker (and so, maybe, in the queue)
	wake   chan struct{} // this waiter's wake-up, while queued
	woken  bool          // the attempt under way follows a wake-up
	beat   heartbeat     // the last refresh of the queue entry
	timer  *time.Timer   // the back-off between attempts; nil until the first
}

// attempted is what one attempt found.
type attempted struct {
	sent   time.Time // when it was sent: a lock it got is held until at least sent+ttl
	ok     bool      // it got the lock
	handed bool      // the lock had been handed to this waiter by a release
	fence  int64
	again  bool // the hand-off script was refused before it wrote anything: repeat the attempt with try
}

// obtain is Obtain after its arguments were checked, without reporting.
// Its errors match ErrNotObtained unless a server call failed.
func (c *Client) obtain(ctx context.Context, key, fenceKey string, ttl time.Duration, opts *callSettings, start time.Time) (l *Lock, err error) {
	o := c.newObtaining(ctx, key, fenceKey, ttl, opts, start)
	// Take no lock that could not be released: where the server refuses the
	// scripts that releasing (or fencing) needs here, say so first.
	if err := c.permitted(ctx, key, o.value, opts.fencing); err != nil {
		if ctx.Err() != nil {
			return nil, errors.Join(ErrNotObtained, ctx.Err())
		}
		return nil, fmt.Errorf("lock: obtain %q: %w", key, err)
	}
	if opts.retry != nil {
		o.hk, o.useHK = c.handoffUsable(ctx, key)
	}
	defer func() { o.finish(ctx, l != nil) }()
	for attempt := 1; ; attempt++ {
		if ctx.Err() != nil {
			// No attempt on an ended context, whatever the client would do
			// with it: the caller must not get a lock it gave up on.
			return nil, notObtained(ctx)
		}
		wait := time.Duration(-1)
		if opts.retry != nil {
			wait = opts.retry.Backoff(attempt)
		}
		a, err := o.attempt(ctx, wait)
		switch {
		case a.again:
			attempt--
			continue
		case err != nil && ctx.Err() != nil:
			return nil, notObtained(ctx)
		case err != nil:
			return nil, fmt.Errorf("lock: obtain %q: %w", key, redisx.Denied("obtain", err, ""))
		case a.ok:
			return o.lock(ctx, a), nil
		}
		o.woken = false
		if wait < 0 { // also without a Retry
			return nil, notObtained(ctx)
		}
		if o.useHK && !o.queued {
			// Join the queue at once rather than after a back-off step.
			if err := o.join(ctx, wait); err != nil {
				return nil, err
			}
			attempt--
			continue
		}
		if err := o.sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// newObtaining sets up an Obtain's attempts: their deadline, and the token
// and value of the acquisition.
func (c *Client) newObtaining(ctx context.Context, key, fenceKey string, ttl time.Duration, opts *callSettings, start time.Time) *obtaining {
	deadline, hasDeadline := ctx.Deadline()
	if opts.maxWait > 0 && (!hasDeadline || start.Add(opts.maxWait).Before(deadline)) {
		deadline = start.Add(opts.maxWait)
	} else if !hasDeadline {
		deadline = start.Add(ttl)
	}
	token := lockvalue.NewToken()
	return &obtaining{
		c: c, key: key, fenceKey: fenceKey, ttl: ttl, opts: opts, start: start, deadline: deadline,
		token: token, value: lockvalue.Encode(token, start, opts.metadata),
	}
}

// attempt makes one attempt: try while not queued; once queued, poll, or
// waitStep when the attempt follows a wake-up, the queue entry is due for
// a refresh, or the poll did not find the lock held by another.
func (o *obtaining) attempt(ctx context.Context, wait time.Duration) (a attempted, err error) {
	a.sent = time.Now()
	switch {
	case !o.queued:
		a.fence, a.ok, err = o.c.try(ctx, o.key, o.fenceKey, o.value, o.ttl)
		return a, err
	case !o.woken && !o.beat.due(max(wait, 0)) && o.c.heldByOther(ctx, o.key, o.value):
		// The common poll of a queued waiter: a plain GET finds the lock
		// held by another, and the entry needs no refresh yet.
		return a, nil
	}
	life := entryLife(max(wait, 0))
	res, fence, err := o.c.waitStep(ctx, o.hk, o.value, o.token, o.ttl, o.opts.fencing, life)
	if err == nil {
		o.beat = heartbeat{at: a.sent, life: life}
		o.c.handoffWorks()
	}
	if err != nil && scriptUnusable(err) && ctx.Err() == nil {
		// Refused before it wrote anything: poll the plain way.
		o.c.handoffRefused(err.Error(), redisx.IsNoPerm(err))
		o.c.wakerRemove(o.hk.channel, o.token)
		o.queued, o.useHK = false, false
		return attempted{again: true}, nil
	}
	a.fence, a.ok, a.handed = fence, res != waitQueued, res == waitHanded
	return a, err
}

// lock is the Lock the attempt a of the Obtain on ctx got, reporting
// first how a waiter came by it when a release had handed it over.
func (o *obtaining) lock(ctx context.Context, a attempted) *Lock {
	l := &Lock{c: o.c, key: o.key, value: o.value, token: o.token, meta: o.opts.metadata, fence: a.fence, sent: a.sent}
	if o.useHK {
		hk := o.hk
		l.handoff = &hk
	}
	if a.handed {
		kind := EventWakeMissed
		if o.woken {
			kind = EventWoken
		}
		o.c.emit(ctx, kind, o.key, time.Since(o.start), nil)
	}
	return l
}

// join queues the waiter: it subscribes to its wake-up first, so that a
// hand-off right after reaches it, and waits until the subscription is
// ready or wait (at most until the deadline) has passed.
func (o *obtaining) join(ctx context.Context, wait time.Duration) error {
	var ready <-chan struct{}
	o.wake, ready = o.c.wakerAdd(ctx, o.hk.channel, o.hk.sharded, o.token)
	o.queued = true
	select {
	case <-ready:
		return nil
	default:
		return sleepUntil(ctx, ready, min(wait, time.Until(o.deadline)))
	}
}

// sleep waits wait, or until the deadline when that comes first (one last
// attempt at the deadline rather than none), or until a release wakes
// the waiter.
func (o *obtaining) sleep(ctx context.Context, wait time.Duration) error {
	if left := time.Until(o.deadline); wait > left {
		if left <= 0 {
			return notObtained(ctx)
		}
		wait = left
	}
	if o.timer == nil {
		o.timer = time.NewTimer(wait)
	} else {
		o.timer.Reset(wait)
	}
	select {
	case <-ctx.Done():
		return notObtained(ctx)
	case <-o.timer.C:
	case <-o.wake:
		o.woken = true
		o.timer.Stop() // since Go 1.23 no stale tick follows
	}
	return nil
}

// finish ends the waiting: it stops the timer and, if the waiter queued,
// stops listening for its wake-up and, when it did not get the lock,
// leaves the queue.
func (o *obtaining) finish(ctx context.Context, got bool) {
	if o.timer != nil {
		o.timer.Stop()
	}
	if !o.queued {
		return
	}
	o.c.wakerRemove(o.hk.channel, o.token)
	if !got {
		// Never leave a lock handed to a waiter that gave up.
		o.c.leave(ctx, o.hk, o.value, o.token)
	}
}

// try makes one attempt. ok is false when the lock is held.
func (c *Client) try(ctx context.Context, key, fenceKey, value string, ttl time.Duration) (fence int64, ok bool, err error) {
	if fenceKey == "" {
		ok, err = c.conn.SetNX(ctx, key, value, ttl)
		return 0, ok, err
	}
	fence, err = c.obtainFenced.Run(ctx, c.conn.Client(), []string{key, fenceKey}, value, ttl.Milliseconds()).Int64()
	return fence, err == nil && fence > 0, err
}

// sleepUntil waits until ready is closed or d has passed; it returns
// notObtained's error if ctx ends first.
func sleepUntil(ctx context.Context, ready <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return notObtained(ctx)
	case <-ready:
	case <-t.C:
	}
	return nil
}

// notObtained is Obtain's error when it did not get the lock: ErrNotObtained,
// joined with the context's error when ctx has ended (or its deadline has
// passed, which ctx.Err reports a moment later), so that the caller's own
// cancellation or deadline is never mistaken for a lock held elsewhere.
func notObtained(ctx context.Context) error {
	err := ctx.Err()
	if d, ok := ctx.Deadline(); ok && err == nil && !time.Now().Before(d) {
		err = context.DeadlineExceeded
	}
	if err != nil {
		return errors.Join(ErrNotObtained, err)
	}
	return ErrNotObtained
}
