package cache

// Joined returns how many callers share c's flight (load or wait) for key
// in progress, 0 if none is; tests use it to know that a caller has joined
// a flight before letting it end.
func Joined(c *Cache, key string) int { return c.flights.Joined(c.keys(key).value) }
