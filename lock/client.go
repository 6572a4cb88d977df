package lock

import (
	"context"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// RedisClient is what New accepts: the go-redis v9 methods a Client uses.
// Every go-redis UniversalClient satisfies it: *redis.Client (also when
// made by redis.NewFailoverClient), *redis.ClusterClient and *redis.Ring.
type RedisClient interface {
	redis.Scripter
	Do(ctx context.Context, args ...any) *redis.Cmd
	Get(ctx context.Context, key string) *redis.StringCmd
	SetNX(ctx context.Context, key string, value any, expiration time.Duration) *redis.BoolCmd
	PTTL(ctx context.Context, key string) *redis.DurationCmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	Pipeline() redis.Pipeliner
}

var (
	_ RedisClient = (*redis.Client)(nil)
	_ RedisClient = (*redis.ClusterClient)(nil)
	_ RedisClient = (*redis.Ring)(nil)
	_ RedisClient = (redis.UniversalClient)(nil)

	_ redisx.Client = RedisClient(nil) // what the Client hands to internal/redisx
)

// ReleaseStrategy is how a lock is deleted only if it still holds the
// caller's value.
type ReleaseStrategy uint8

const (
	// ReleaseLua runs a compare-and-delete script. Every server with Lua.
	ReleaseLua ReleaseStrategy = iota
	// ReleaseDelIfEq sends DELIFEQ key value (Valkey 9.0 and 9.1).
	ReleaseDelIfEq
	// ReleaseDelex sends DELEX key IFEQ value (Redis >= 8.4, Valkey >= 9.2,
	// Dragonfly >= 1.37).
	ReleaseDelex
)

// String returns the command used, e.g. "DELEX IFEQ".
func (s ReleaseStrategy) String() string { return redisx.ReleaseStrategy(s).String() }

// ExtendStrategy is how a lock's expiry is reset only if it still holds
// the caller's value. No server has a conditional PEXPIRE.
type ExtendStrategy uint8

const (
	// ExtendLua runs a compare-and-pexpire script.
	ExtendLua ExtendStrategy = iota
	// ExtendSetIfEq sends SET key value IFEQ value PX ms (Redis >= 8.4,
	// Valkey >= 8.1).
	ExtendSetIfEq
)

// String returns the command used, e.g. "SET IFEQ".
func (s ExtendStrategy) String() string { return redisx.ExtendStrategy(s).String() }

// DigestStrategy is how a value longer than Options.DigestThreshold is
// compared without sending it back.
type DigestStrategy uint8

const (
	// DigestLua compares redis.sha1hex(value) in a script with a SHA-1 the
	// client computed.
	DigestLua DigestStrategy = iota
	// DigestNative uses DELEX/SET ... IFDEQ with the server's XXH3 digest
	// (Redis >= 8.4).
	DigestNative
)

// String returns the comparison used, e.g. "IFDEQ (XXH3)".
func (s DigestStrategy) String() string { return redisx.DigestStrategy(s).String() }

// Capabilities is what a server was found to offer and the strategy chosen
// for each operation, as (*Client).Capabilities reports it. The zero value
// stands for the Lua fallbacks, which work on every server with scripting.
type Capabilities struct {
	// Server and Version come from HELLO, for display; empty when unknown.
	Server, Version string

	Release ReleaseStrategy
	Extend  ExtendStrategy
	Digest  DigestStrategy

	// DelIfEq records that DELIFEQ answered, so a refused DELEX can fall
	// back to it rather than straight to Lua.
	DelIfEq bool

	// ScriptsDenied is the server's reply when its ACL refuses scripts
	// (EVALSHA or EVAL) to the client's user, as the probe or a later
	// refusal found; empty when scripts may run. The strategies above that
	// need no script work as usual; an operation that would need one fails
	// at once with ErrPermission, before it takes anything.
	ScriptsDenied string

	// ACLRefused lists the commands the probe found refused by the ACL,
	// space-separated (e.g. "DELEX DIGEST"): those that would have spared
	// a script where the server offers them. Empty when none was.
	ACLRefused string

	// AnnounceDenied is the server's reply when it refused a cache's
	// announcement channel (SUBSCRIBE or PUBLISH; an ACL without the
	// channel, the default for new users since Redis 7). Waiting
	// processes then learn of a finished rebuild by polling. Only
	// cache.(*Cache).Capabilities fills it in; a lock Client logs a refusal
	// of its hand-off channel instead (see ObtainOptions.Retry).
	AnnounceDenied string

	// HandoffDenied is the server's reply when it refused the hand-off
	// script of a lock Client (an ACL without a command it calls, or a
	// server without one; see ObtainOptions.Retry): waiters then poll, and
	// the script is tried again a minute later. Only
	// lock.(*Client).Capabilities fills it in.
	HandoffDenied string

	// NearDenied is the server's reply when it refused CLIENT TRACKING to
	// a cache's near cache (Options.Near), which then stays off and asks
	// again a minute later. Only cache.(*Cache).Capabilities fills it in.
	NearDenied string
}

// String describes the server and the chosen strategies in one line, e.g.
// "redis 8.6.3: release=DELEX IFEQ extend=SET IFEQ digest=IFDEQ (XXH3)".
func (c Capabilities) String() string { return toConn(c).String() }

// fromConn and toConn convert between Capabilities and the internal
// package's copy of it (internal/lockx has the same pair for cache and the
// benchmarks).
func fromConn(c redisx.Capabilities) Capabilities {
	return Capabilities{
		Server: c.Server, Version: c.Version,
		Release: ReleaseStrategy(c.Release), Extend: ExtendStrategy(c.Extend), Digest: DigestStrategy(c.Digest),
		DelIfEq: c.DelIfEq, ScriptsDenied: c.ScriptsDenied, ACLRefused: c.ACLRefused, AnnounceDenied: c.AnnounceDenied,
		HandoffDenied: c.HandoffDenied, NearDenied: c.NearDenied,
	}
}

func toConn(c Capabilities) redisx.Capabilities {
	return redisx.Capabilities{
		Server: c.Server, Version: c.Version,
		Release: redisx.ReleaseStrategy(c.Release), Extend: redisx.ExtendStrategy(c.Extend), Digest: redisx.DigestStrategy(c.Digest),
		DelIfEq: c.DelIfEq, ScriptsDenied: c.ScriptsDenied, ACLRefused: c.ACLRefused, AnnounceDenied: c.AnnounceDenied,
		HandoffDenied: c.HandoffDenied, NearDenied: c.NearDenied,
	}
}
