package cache

import (
	"time"

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
