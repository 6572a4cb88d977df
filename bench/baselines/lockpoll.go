package baselines

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed release.lua
var releaseSrc string

// LockPoll is cache-aside with a hand-written distributed lock, as teams
// often write it: on a miss, SET key:lock token NX PX LockTTL; the winner
// checks the key once more, loads, SETs the value and deletes its lock
// (compare-and-delete, so it never deletes another's); the losers sleep
// Poll and GET again, trying the lock again if it is gone without a value.
// It is safe for concurrent use. Use NewLockPoll to create one.
type LockPoll[V any] struct {
	rdb           Client
	ttl, lockTTL  time.Duration
	poll, maxWait time.Duration
	release       *redis.Script
}

// NewLockPoll returns a LockPoll storing values for ttl. Losers re-read
// every poll (the bench uses 50 ms) and give up after maxWait.
func NewLockPoll[V any](rdb Client, ttl, lockTTL, poll, maxWait time.Duration) *LockPoll[V] {
	return &LockPoll[V]{rdb: rdb, ttl: ttl, lockTTL: lockTTL, poll: poll, maxWait: maxWait,
		release: redis.NewScript(releaseSrc)}
}

// ErrWaitTimeout is returned when a loser waited maxWait without the value
// appearing.
var ErrWaitTimeout = errors.New("baselines: gave up waiting for the lock holder")

// Get returns the cached value of key; on a miss one caller in the whole
// cluster loads while the others poll.
func (l *LockPoll[V]) Get(ctx context.Context, key string, load Loader[V]) (V, error) {
	lockKey := key + ":lock"
	deadline := time.Now().Add(l.maxWait)
	var t *time.Timer
	for {
		v, err := read[V](ctx, l.rdb, key)
		if !errors.Is(err, errMiss) {
			return v, err
		}
		token := newToken()
		ok, err := l.rdb.SetNX(ctx, lockKey, token, l.lockTTL).Result()
		if err != nil {
			return v, fmt.Errorf("baselines: lock %q: %w", key, err)
		}
		if ok {
			return l.loadLocked(ctx, key, lockKey, token, load)
		}
		if time.Now().After(deadline) {
			return v, fmt.Errorf("%w (key %q)", ErrWaitTimeout, key)
		}
		if t == nil {
			t = time.NewTimer(l.poll)
			defer t.Stop()
		} else {
			t.Reset(l.poll)
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-t.C:
		}
	}
}

// loadLocked runs while holding the lock: re-check, load, store, release.
func (l *LockPoll[V]) loadLocked(ctx context.Context, key, lockKey, token string, load Loader[V]) (V, error) {
	defer func() {
		// Released on a context of its own: a caller that gave up must not
		// leave the others polling until the lock expires.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = l.release.Run(rctx, l.rdb, []string{lockKey}, token).Err()
	}()
	// Someone may have written the value between our GET and our SET NX.
	v, err := read[V](ctx, l.rdb, key)
	if !errors.Is(err, errMiss) {
		return v, err
	}
	return loadAndStore(ctx, l.rdb, key, l.ttl, load)
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
