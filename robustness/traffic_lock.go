// This file holds the lock traffic: fenced read-modify-writes of counters
// on the database under lock.Do (and, now and then, under a lock obtained
// without keep-alive by a holder that stalls past its TTL), and scheduled
// slots that lock.RunOnce must run on one process only.

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

const (
	counters       = 2
	lockHold       = 400 * time.Millisecond
	slotWidth      = 250 * time.Millisecond
	runOnceMinHold = time.Second // how long a slot's lock is kept after its run
)

// The fenced store, on the database: a read registers the reader's fence
// and is refused to a fence older than one registered; a write is accepted
// only from a fence at least as new as every one registered, and appends
// "fence proc id" to the counter's log, which the checker reads at the end.
var (
	// KEYS[1]=counter KEYS[2]=largest fence; ARGV[1]=fence. -1: refused.
	fencedRead = redis.NewScript(`
local max = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < max then return -1 end
redis.call('SET', KEYS[2], ARGV[1])
return tonumber(redis.call('GET', KEYS[1]) or '0')`)
	// KEYS[1]=counter KEYS[2]=largest fence KEYS[3]=log; ARGV[1]=fence
	// ARGV[2]=new value ARGV[3]=log entry ARGV[4]="1" to skip the check
	// (sabotage). 1: written, 0: refused.
	fencedWrite = redis.NewScript(`
if ARGV[4] ~= '1' and tonumber(ARGV[1]) < tonumber(redis.call('GET', KEYS[2]) or '0') then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('RPUSH', KEYS[3], ARGV[3])
return 1`)
)

func counterKeys(prefix string, n int) []string {
	k := fmt.Sprintf("%s:ctr%d", prefix, n)
	return []string{k, k + ":fence", k + ":log"}
}

func (w *worker) lockTraffic(ctx context.Context, r *rand.Rand) {
	fencing, retry, maxWait := lock.WithFencing(),
		lock.WithRetry(lock.ExponentialBackoff(5*time.Millisecond, 50*time.Millisecond)), lock.WithMaxWait(time.Second)
	for pause(ctx, time.Duration(r.IntN(30))*time.Millisecond) {
		n := r.IntN(counters)
		key := fmt.Sprintf("%s:lock%d", w.cfg.Prefix, n)
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		lctx, info, rec := w.begin(octx, Record{Kind: kLock, Key: fmt.Sprint(n)})
		var err error
		if r.IntN(15) == 0 {
			// A holder that stalls past its lock's TTL without noticing.
			rec.Detail = "stall"
			var l *lock.Lock
			if l, err = w.locks.Obtain(lctx, key, lockHold, fencing, retry, maxWait); err == nil {
				rec.Fence = l.Fence()
				rec.Value, err = w.increment(context.WithoutCancel(lctx), n, info.id, l.Fence(), lockHold+time.Duration(r.IntN(300))*time.Millisecond)
				_ = l.Release(context.WithoutCancel(lctx))
			}
		} else {
			work := time.Duration(r.IntN(5)) * time.Millisecond
			var token string
			err = w.locks.Do(lctx, key, lockHold, func(ctx context.Context) error {
				l := lock.FromContext(ctx)
				fence := l.Fence()
				rec.Fence, token = fence, l.Token()
				var err error
				rec.Value, err = w.increment(ctx, n, info.id, fence, work)
				return err
			}, fencing, retry, maxWait)
			if errors.Is(err, lock.ErrLost) && token != "" {
				// What the server holds, read past the faults: a lock
				// declared lost that the server still holds for a while
				// is a loss the keep-alive made up.
				rctx, cancel := context.WithTimeout(context.Background(), time.Second)
				v, gerr := w.raw.Get(rctx, key).Result()
				ttl, terr := w.raw.PTTL(rctx, key).Result()
				cancel()
				if gerr == nil && terr == nil {
					rec.Detail = fmt.Sprintf("lost: held=%v pttl=%d", strings.Contains(v, token), ttl.Milliseconds())
				}
			}
		}
		w.end(info, rec, err)
		cancel()
	}
}

// increment reads counter n (registering fence), works for d, checks ctx
// and writes it back plus one. It returns "accepted", "refused-read" or
// "refused-write"; an error leaves the outcome unknown.
func (w *worker) increment(ctx context.Context, n int, id, fence int64, d time.Duration) (string, error) {
	if fence <= 0 {
		return "", fmt.Errorf("no fencing number (%d)", fence)
	}
	keys := counterKeys(w.cfg.Prefix, n)
	dbctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	cur, err := fencedRead.Run(dbctx, w.db, keys[:2], fence).Int64()
	switch {
	case err != nil:
		return "", fmt.Errorf("fenced read: %w", err)
	case cur < 0:
		return "refused-read", nil
	}
	time.Sleep(d) // the work, or a stall that ignores every signal
	if err := ctx.Err(); err != nil {
		return "cancelled", nil
	}
	skip := "0"
	if w.cfg.sabotaged("fence") {
		skip = "1"
	}
	ok, err := fencedWrite.Run(dbctx, w.db, keys, fence, cur+1, fmt.Sprintf("%d %s %d", fence, w.cfg.Proc, id), skip).Int64()
	switch {
	case err != nil:
		return "", fmt.Errorf("fenced write: %w", err)
	case ok == 0:
		return "refused-write", nil
	}
	return "accepted", nil
}

// runOnceTraffic calls RunOnce for every slot of slotWidth; the checker
// counts the runs per slot across processes.
func (w *worker) runOnceTraffic(ctx context.Context, r *rand.Rand) {
	for {
		next := time.Now().Truncate(slotWidth).Add(slotWidth)
		if !pause(ctx, time.Until(next)+time.Duration(r.IntN(20))*time.Millisecond) {
			return
		}
		slot := next.UnixNano() / int64(slotWidth)
		octx, cancel := context.WithTimeout(ctx, slotWidth)
		lctx, info, rec := w.begin(octx, Record{Kind: kRunOnce, Key: fmt.Sprint(slot)})
		ran, err := w.locks.RunOnce(lctx, fmt.Sprintf("%s:job:%d", w.cfg.Prefix, slot), 2*time.Second, func(context.Context) error {
			rec.Value = "ran"
			return nil
		}, lock.WithMinHold(runOnceMinHold))
		if !ran && err == nil {
			rec.Value = "skipped"
		}
		if errors.Is(err, lock.ErrNotObtained) {
			err = nil
			rec.Value = "not-obtained"
		}
		w.end(info, rec, err)
		cancel()
	}
}
