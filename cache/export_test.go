package cache

import (
	"context"
	"sync"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// NewRecheck is New with the server's refusals (of CLIENT TRACKING,
// commands, scripts) asked again after recheck instead of a minute.
func NewRecheck(rc RedisClient, opts *Options, recheck time.Duration) (*Cache, error) {
	return newCache(rc, opts, recheck)
}

// RefreshRunning reports whether c has a background refresh of key in
// progress; tests use it to wait for one to end, which no event marks
// (its announcement is sent just before it ends).
func RefreshRunning(c *Cache, key string) bool { return c.refreshes.Joined(c.keys(key).value) > 0 }

// AddFillHook adds h to the clients the near cache's fills read through:
// c's readers with targeted tracking (now and later ones), else rc, the
// client c was made with.
func AddFillHook(c *Cache, rc redis.UniversalClient, h redis.Hook) {
	t := c.track
	if !t.targeted {
		rc.AddHook(h)
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.hook = h
	for _, tr := range t.trackers {
		if r := tr.reader.Load(); r != nil {
			r.AddHook(h)
		}
	}
}

// LoadJoiners returns how many callers wait for the loader run of key in
// progress in c besides the one running it (fail-open loads that joined
// it), or 0 if none is in progress.
func LoadJoiners(c *Cache, key string) int { return c.runs.joiners(c.keys(key).value) }

// BeginLoad registers a loader run of key in c, as a fail-open load
// does when it starts, and returns the function that ends it.
func BeginLoad(c *Cache, key string) (end func()) {
	k := c.keys(key).value
	r := c.runs.begin(k, false)
	return func() { c.runs.end(k, r, outcome{}, nil) }
}

// Joined returns how many callers share c's flight (load or wait) for key
// in progress, 0 if none is; tests use it to know that a caller has joined
// a flight before letting it end.
func Joined(c *Cache, key string) int { return c.flights.Joined(c.keys(key).value) }

// Slot is the Cluster hash slot of the keys whose hash tag is tag (the
// server confirms it where tests rely on it).
func Slot(tag string) uint16 { return redisx.Slot(tag) }

// Expire is what package middleware sets a load's lifetime with from
// inside its loader (engine.View.Expire), for the tests of that path.
func Expire(ctx context.Context, fresh, stale time.Duration) bool { return expire(ctx, fresh, stale) }

// BatcherTried returns how many refreshes of b have tried to claim their
// key (taken or not) so far.
func BatcherTried[V any](b *Batcher[V]) int64 { return b.q.tried.Load() }

// HoldBatcherWindows makes every window of b's rounds, open ones and later
// ones, last until end is called: rounds then go to the loader only when
// full, until end.
func HoldBatcherWindows[V any](b *Batcher[V]) (end func()) {
	ch := make(chan time.Time)
	var once sync.Once
	b.q.timer = func(time.Duration) (<-chan time.Time, func() bool) { return ch, func() bool { return true } }
	return func() { once.Do(func() { close(ch) }) }
}

// BatcherLoadsJoined returns how many loads of b's Get have joined a
// round so far.
func BatcherLoadsJoined[V any](b *Batcher[V]) int64 { return b.misses.joined.Load() }
