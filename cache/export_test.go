package cache

// RefreshRunning reports whether c has a background refresh of key in
// progress; tests use it to wait for one to end, which no event marks
// (its announcement is sent just before it ends).
func RefreshRunning(c *Cache, key string) bool { return c.refreshes.Joined(c.keys(key).value) > 0 }
