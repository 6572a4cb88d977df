// This file holds the lock traffic: lockers doing fenced read-modify-writes
// of counters on the database, and the database scripts that enforce the
// fences.

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// The "database" is reached over the direct, fault-free client. Fenced
// counters follow the rule a store needs for fencing to work: a read
// registers the holder's fence (and is refused to an older one), and a
// write is accepted only from the newest fence that read. Registering on
// read matters: otherwise a holder paused between its read and its write
// could overwrite the increment of a newer holder that read after it.
var (
	// KEYS[1]=counter KEYS[2]=largest fence seen; ARGV[1]=fence.
	// Returns the counter, or -1 if a newer fence has read.
	fencedRead = redis.NewScript(`
local max = tonumber(redis.call('GET', KEYS[2]) or '0')
local f = tonumber(ARGV[1])
if f < max then return -1 end
redis.call('SET', KEYS[2], ARGV[1])
return tonumber(redis.call('GET', KEYS[1]) or '0')`)
	// KEYS[1]=counter KEYS[2]=largest fence seen; ARGV[1]=fence ARGV[2]=new value.
	// Returns 1 if written, 0 if a newer fence has read since.
	fencedWrite = redis.NewScript(`
if tonumber(ARGV[1]) < tonumber(redis.call('GET', KEYS[2]) or '0') then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1`)
)

// locker increments fenced counters under the lock. Most rounds use Do,
// whose work checks its context before writing; a few are a holder that
// takes the lock without keeping it alive and stalls past its TTL (a long
// GC pause, a stopped VM), which only fencing can stop.
func (w *worker) locker(ctx context.Context, r *rand.Rand) {
	const ttl = 400 * time.Millisecond
	fencing, retry, maxWait := lock.WithFencing(),
		lock.WithRetry(lock.ExponentialBackoff(5*time.Millisecond, 50*time.Millisecond)), lock.WithMaxWait(time.Second)
	for pause(ctx, time.Duration(r.IntN(20))*time.Millisecond) {
		n := r.IntN(w.cfg.Counters)
		if runs := w.lockRuns.Add(1); w.cfg.Sabotage && runs%20 == 0 {
			w.accepted[n].Add(1) // a lost update, on purpose: counted, never written
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if r.IntN(20) == 0 {
			stall := ttl + time.Duration(r.IntN(400))*time.Millisecond
			l, err := w.locks.Obtain(lctx, lockKey(w.cfg.Prefix, n), ttl, fencing, retry, maxWait)
			if err != nil {
				w.countErr("lock Obtain", err)
			} else {
				_ = w.increment(context.WithoutCancel(lctx), n, l.Fence(), stall)
				// The lock expired during the stall: releasing it is ErrNotHeld.
				if err := l.Release(context.WithoutCancel(lctx)); err != nil && !errors.Is(err, lock.ErrNotHeld) {
					w.countErr("lock Release", err)
				}
			}
			cancel()
			continue
		}
		err := w.locks.Do(lctx, lockKey(w.cfg.Prefix, n), ttl, func(ctx context.Context) error {
			return w.increment(ctx, n, lock.FromContext(ctx).Fence(), time.Duration(r.IntN(5))*time.Millisecond)
		}, fencing, retry, maxWait)
		cancel()
		if err != nil && ctx.Err() == nil {
			w.countErr("lock Do", err)
		}
	}
}

// increment is a fenced read-modify-write of counter n on the database:
// read (registering the fence), work for d, check ctx, write back +1.
func (w *worker) increment(ctx context.Context, n int, fence int64, d time.Duration) error {
	if fence <= 0 {
		return fmt.Errorf("no fencing number (%d)", fence)
	}
	keys := []string{ctrKey(w.cfg.Prefix, n), ctrKey(w.cfg.Prefix, n) + ":fence"}
	// The database is not faulted, and an answer must not be lost to a
	// cancelled context: the count of accepted writes must be exact.
	dbctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	cur, err := fencedRead.Run(dbctx, w.direct, keys, fence).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("fenced read: %w", err)
	case cur < 0:
		w.lateReads.Add(1)
		return errLateRead
	}
	time.Sleep(d) // the work, or a stall that ignores every signal
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	ok, err := fencedWrite.Run(dbctx, w.direct, keys, fence, cur+1).Int64()
	switch {
	case err != nil:
		return fmt.Errorf("fenced write: %w", err)
	case ok == 0:
		w.lateWrites.Add(1)
		return errLateWrite
	}
	w.accepted[n].Add(1)
	return nil
}

var (
	errLateRead  = errors.New("fenced read refused: a newer holder has read")
	errLateWrite = errors.New("fenced write refused: a newer holder has read")
)
