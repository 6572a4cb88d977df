package cache

// AnnounceCounts returns how many announcement messages c has received,
// how many channel subscriptions it sent on open connections, and how many
// waits read the key again because their subscription was confirmed after
// their read (see Cache.await).
func AnnounceCounts(c *Cache) (delivered, subscribes, rechecks uint64) {
	d, s := c.ann.counts()
	return d, s, c.ann.rechecks.Load()
}

// BeforeSubscribe makes c run fn when one of its waiters, having read
// the stored value key (NS:{K}), is about to subscribe to its channel.
// Call it before c is used.
func BeforeSubscribe(c *Cache, fn func(valueKey string)) { c.ann.beforeSubscribe = fn }

// TwoStepWrites makes c's misses write, and then announce, in two round
// trips, as where the write's script cannot publish: tests that hold an
// announcement back while the value is stored use it. Call it before c
// is used.
func TwoStepWrites(c *Cache) { c.ann.twoStep = true }

// CoveredWaits returns how many waits of c began with a subscription the
// server confirmed before the read that found the rebuild to wait for: a
// notice of that rebuild's outcome reaches them (see Cache.await).
func CoveredWaits(c *Cache) uint64 { return c.ann.covered.Load() }

// LostWaits returns how many covered waits of c ended because their
// subscription's connection failed (see Cache.await).
func LostWaits(c *Cache) uint64 { return c.ann.lostWaits.Load() }
