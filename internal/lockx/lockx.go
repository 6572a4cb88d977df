// Package lockx is what stampede's own packages (cache, the tests, the
// benchmarks) may do with package lock beyond its public API: tell a lock's
// value from other data, replace a held lock with a result, convert its
// Capabilities to and from internal/redisx's, and fix the strategies of a
// client instead of probing the server.
package lockx

import (
	"context"
	"time"

	"github.com/hotkv/stampede/internal/lockvalue"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/lock"
)

// ParseValue reports whether v is a lock value written by package lock,
// and if so what it holds (Info.TTL is zero). Package cache uses it to tell
// a lock from its own data in the keys they share.
func ParseValue(v string) (lock.Info, bool) {
	val, ok := lockvalue.Decode(v)
	return lock.Info{Token: val.Token, Since: val.Since, Metadata: val.Metadata}, ok
}

// Replace ends l by replacing its value with value, expiring after ttl, if
// the key still holds this acquisition; otherwise it returns
// lock.ErrNotHeld and changes nothing. It lets a lock on a key stand for
// "this key is being computed" and hand the key over to the result in one
// atomic step: whoever deleted or overwrote the key meanwhile wins. A ttl
// below 1ms is an error wrapping lock.ErrInvalid.
func Replace(ctx context.Context, l *lock.Lock, value string, ttl time.Duration) error {
	return lockvalue.Replace(ctx, l, value, ttl)
}

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
