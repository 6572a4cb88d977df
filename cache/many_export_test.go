package cache

// FlightJoined returns how many callers wait on the flight of key in c
// (0 if none runs): tests sequence on a caller having joined.
func FlightJoined(c *Cache, key string) int { return c.flights.Joined(c.keys(key).value) }
