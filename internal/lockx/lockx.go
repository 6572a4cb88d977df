// Package lockx is what stampede's own packages (cache, the tests, the
// benchmarks) may do with package lock beyond its public API: convert its
// Capabilities to and from internal/redisx's, and fix the strategies of a
// client instead of probing the server.
package lockx

import (
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/lock"
)

// Capabilities converts what a redisx.Conn reports to lock's public form.
func Capabilities(c redisx.Capabilities) lock.Capabilities {
	return lock.Capabilities{
		Server: c.Server, Version: c.Version,
		Release: lock.ReleaseStrategy(c.Release), Extend: lock.ExtendStrategy(c.Extend), Digest: lock.DigestStrategy(c.Digest),
		DelIfEq: c.DelIfEq, ScriptsDenied: c.ScriptsDenied, ACLRefused: c.ACLRefused, AnnounceDenied: c.AnnounceDenied,
		HandoffDenied: c.HandoffDenied, NearDenied: c.NearDenied,
	}
}

// Strategies converts lock's Capabilities to redisx's.
func Strategies(c lock.Capabilities) redisx.Capabilities {
	return redisx.Capabilities{
		Server: c.Server, Version: c.Version,
		Release: redisx.ReleaseStrategy(c.Release), Extend: redisx.ExtendStrategy(c.Extend), Digest: redisx.DigestStrategy(c.Digest),
		DelIfEq: c.DelIfEq, ScriptsDenied: c.ScriptsDenied, ACLRefused: c.ACLRefused, AnnounceDenied: c.AnnounceDenied,
		HandoffDenied: c.HandoffDenied, NearDenied: c.NearDenied,
	}
}

// Force returns rc with its strategies fixed to caps: a lock.Client made
// with it (lock.New(Force(rc, caps), opts)) uses caps instead of probing
// the server, so that tests and benchmarks can run every strategy on every
// server. A strategy the server refuses at run time is still downgraded.
// This is what lock.Options.Capabilities did before it left the public API.
func Force(rc lock.RedisClient, caps lock.Capabilities) lock.RedisClient {
	return &redisx.Forced{Client: rc, Caps: Strategies(caps)}
}
