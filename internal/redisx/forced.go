package redisx

// Forced wraps a client to fix the strategies a Conn uses instead of
// probing the server: NewConn given a *Forced talks to its Client with
// Caps, and so does a lock.Client made with one (lock.New(&Forced{rc,
// caps}, nil): a *Forced is a lock.RedisClient). Tests and the benchmarks
// use it to run every strategy on every server; it is not part of the
// public API. A strategy the server refuses at run time is still
// downgraded.
type Forced struct {
	Client
	Caps Capabilities
}

// unforce returns the client a Conn talks to and the capabilities it is
// forced to: a *Forced's Client and Caps, else c and forced.
func unforce(c Client, forced *Capabilities) (Client, *Capabilities) {
	if f, ok := c.(*Forced); ok {
		caps := f.Caps
		return f.Client, &caps
	}
	return c, forced
}
