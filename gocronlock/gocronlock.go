// Package gocronlock is a distributed Locker for github.com/go-co-op/gocron/v2
// built on package lock: a job scheduled on every instance of a service
// runs, at each tick, on one instance only.
//
//	locks, _ := lock.New(rdb, nil)
//	locker, _ := gocronlock.New(locks, &gocronlock.Options{MinHold: 50 * time.Second})
//	s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
//	s.NewJob(gocron.DurationJob(time.Minute), gocron.NewTask(report), gocron.WithName("report"))
//
// # MinHold
//
// A lock that is released as soon as a fast job ends lets an instance whose
// clock is a little behind obtain it a moment later and run the same tick
// again. As lock.(*Client).RunOnce does, Unlock therefore keeps the lock
// until MinHold has passed since it was obtained, by shortening its expiry
// to what is left of MinHold rather than deleting it; only once MinHold has
// passed does Unlock delete it. Set MinHold to most of the job's interval:
// more than the largest clock skew between instances, less than the
// interval minus that skew (so the next tick finds the lock free). Jobs
// with different intervals need different MinHolds: give each job its own
// Locker with gocron.WithDistributedJobLocker.
//
// # Long jobs
//
// While the job runs the lock is refreshed back to TTL every TTL/3, so a
// job may outlive TTL; TTL only bounds how long the lock of a crashed
// instance blocks the job. gocron gives a Locker no way to stop a job, so
// if refreshing fails until the lock expires the job goes on, and Unlock
// reports the loss with an error matching lock.ErrLost.
package gocronlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/hotkv/stampede/lock"
)

// DefaultPrefix is prepended to gocron's key (the job's name) when
// Options.Prefix is empty.
const DefaultPrefix = "gocron:"

// DefaultTTL is the lock's expiry while a job runs when Options.TTL is 0
// (or MinHold, if that is longer).
const DefaultTTL = 30 * time.Second

// unlockTimeout bounds Unlock's server call when gocron's context has
// already ended (the scheduler is shutting down).
const unlockTimeout = 5 * time.Second

// Options configure a Locker.
type Options struct {
	// MinHold is how long a lock is kept after it was obtained, even when
	// the job ends sooner; see the package documentation. Required: most
	// of the job's interval.
	MinHold time.Duration

	// TTL is the lock's expiry, refreshed every TTL/3 while the job runs.
	// At least MinHold. Default: the larger of DefaultTTL and MinHold.
	TTL time.Duration

	// Prefix is prepended to the job's name to form the Redis key.
	// Default: DefaultPrefix.
	Prefix string

	// Metadata is stored with each lock, e.g. the instance's name; read
	// it with lock.(*Client).Inspect.
	Metadata string
}

// Locker is a gocron.Locker on a lock.Client. It is safe for concurrent
// use by several jobs and schedulers.
type Locker struct {
	c       *lock.Client
	minHold time.Duration
	ttl     time.Duration
	prefix  string
	meta    string
}

var _ gocron.Locker = (*Locker)(nil)

// New returns a Locker obtaining its locks with c. Its errors match
// lock.ErrInvalid.
func New(c *lock.Client, opts *Options) (*Locker, error) {
	switch {
	case c == nil:
		return nil, invalid("c is nil: New needs a *lock.Client")
	case opts == nil:
		return nil, invalid("opts is nil: Options.MinHold is required (most of the job's interval)")
	case opts.MinHold == 0:
		return nil, invalid("Options.MinHold is not set: set it to most of the job's interval")
	case opts.MinHold < time.Millisecond:
		return nil, invalid("Options.MinHold %v is below 1ms", opts.MinHold)
	case opts.TTL < 0:
		return nil, invalid("Options.TTL %v is negative", opts.TTL)
	case opts.TTL > 0 && opts.TTL < opts.MinHold:
		return nil, invalid("Options.TTL %v is below Options.MinHold %v", opts.TTL, opts.MinHold)
	}
	l := &Locker{c: c, minHold: opts.MinHold, ttl: opts.TTL, prefix: opts.Prefix, meta: opts.Metadata}
	if l.ttl == 0 {
		l.ttl = max(DefaultTTL, l.minHold)
	}
	if l.prefix == "" {
		l.prefix = DefaultPrefix
	}
	return l, nil
}

// invalidError is a bad argument or option: its text names the argument
// and its value, and it matches lock.ErrInvalid. (This module is released
// on its own: it does not import the root module's internal packages,
// whose API may change in any release.)
type invalidError string

func (e invalidError) Error() string { return string(e) }

// Is reports whether target is lock.ErrInvalid.
func (e invalidError) Is(target error) bool { return target == lock.ErrInvalid }

// invalid returns an invalidError whose text is "gocronlock: " and the
// formatted message.
func invalid(format string, args ...any) error {
	return invalidError("gocronlock: " + fmt.Sprintf(format, args...))
}

// Lock obtains the lock for key (gocron passes the job's name) with one
// attempt, and keeps it alive until Unlock. If another instance holds it,
// the error matches lock.ErrNotObtained and gocron skips this run.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	if key == "" {
		return nil, invalid("Lock key (the job's name) is empty")
	}
	start := time.Now()
	held, err := l.c.Obtain(ctx, l.prefix+key, l.ttl, lock.WithMetadata(l.meta))
	if err != nil {
		return nil, fmt.Errorf("gocronlock: job %q: %w", key, err)
	}
	_, stop := held.KeepAlive(context.WithoutCancel(ctx), l.ttl, 0)
	return &Lock{held: held, start: start, minHold: l.minHold, stop: stop}, nil
}

// Lock is one job run's hold on its key, as Locker.Lock returns it.
type Lock struct {
	held    *lock.Lock
	start   time.Time
	minHold time.Duration
	stop    func() error

	once sync.Once
	err  error
}

// Held returns the underlying lock (its key, token, metadata).
func (h *Lock) Held() *lock.Lock { return h.held }

// Unlock stops refreshing the lock and, if less than MinHold has passed
// since it was obtained, sets it to expire when MinHold has passed;
// otherwise it deletes it. Either acts only if the key still holds this
// acquisition: a lock that expired or is now another instance's is left
// alone, and Unlock returns an error matching lock.ErrLost (and
// lock.ErrNotHeld). Calls after the first return the first's result and
// do nothing. An ended ctx still gets a few seconds to reach the server.
func (h *Lock) Unlock(ctx context.Context) error {
	h.once.Do(func() { h.err = h.unlock(ctx) })
	return h.err
}

func (h *Lock) unlock(ctx context.Context) error {
	lost := h.stop()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
	defer cancel()
	var err error
	if rest := h.minHold - time.Since(h.start); rest >= time.Millisecond {
		err = h.held.Refresh(ctx, rest)
	} else {
		err = h.held.Release(ctx)
	}
	switch {
	case errors.Is(err, lock.ErrNotHeld) && lost == nil:
		return fmt.Errorf("gocronlock: %w: %q expired or was taken before the job ended: %w", lock.ErrLost, h.held.Key(), err)
	case errors.Is(err, lock.ErrNotHeld):
		return fmt.Errorf("gocronlock: %w", errors.Join(lost, err))
	case err != nil:
		return fmt.Errorf("gocronlock: %w", errors.Join(lost, err))
	}
	return lost
}
