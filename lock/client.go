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

// The strategies and Capabilities are declared once, in internal/redisx,
// next to the probe that fills them in and the commands that follow them;
// lock names them for its users (and package cache returns them). An
// alias shows no fields or methods in go doc, hence their list in the doc
// comments here (TestCapabilities_docListsFields keeps it complete).

// ReleaseStrategy is how a lock is deleted only if it still holds the
// caller's value. Its String method names the command, e.g. "DELEX IFEQ".
type ReleaseStrategy = redisx.ReleaseStrategy

const (
	// ReleaseLua runs a compare-and-delete script. Every server with Lua.
	ReleaseLua ReleaseStrategy = redisx.ReleaseLua
	// ReleaseDelIfEq sends DELIFEQ key value (Valkey 9.0 and 9.1).
	ReleaseDelIfEq ReleaseStrategy = redisx.ReleaseDelIfEq
	// ReleaseDelex sends DELEX key IFEQ value (Redis >= 8.4, Valkey >= 9.2,
	// Dragonfly >= 1.37).
	ReleaseDelex ReleaseStrategy = redisx.ReleaseDelex
)

// ExtendStrategy is how a lock's expiry is reset only if it still holds
// the caller's value. No server has a conditional PEXPIRE. Its String
// method names the command, e.g. "SET IFEQ".
type ExtendStrategy = redisx.ExtendStrategy

const (
	// ExtendLua runs a compare-and-pexpire script.
	ExtendLua ExtendStrategy = redisx.ExtendLua
	// ExtendSetIfEq sends SET key value IFEQ value PX ms (Redis >= 8.4,
	// Valkey >= 8.1).
	ExtendSetIfEq ExtendStrategy = redisx.ExtendSetIfEq
)

// DigestStrategy is how a value longer than Options.DigestThreshold is
// compared without sending it back. Its String method names the
// comparison, e.g. "IFDEQ (XXH3)".
type DigestStrategy = redisx.DigestStrategy

const (
	// DigestLua compares redis.sha1hex(value) in a script with a SHA-1 the
	// client computed.
	DigestLua DigestStrategy = redisx.DigestLua
	// DigestNative uses DELEX/SET ... IFDEQ with the server's XXH3 digest
	// (Redis >= 8.4).
	DigestNative DigestStrategy = redisx.DigestNative
)

// Capabilities is what a server was found to offer and the strategy chosen
// for each operation, as (*Client).Capabilities and
// cache.(*Cache).Capabilities report it. The zero value stands for the Lua
// fallbacks, which work on every server with scripting. Its String method
// describes it in one line, e.g.
// "redis 8.6.3: release=DELEX IFEQ extend=SET IFEQ digest=IFDEQ (XXH3)".
// Its fields:
//
//	Server, Version string  // from HELLO, for display; empty when unknown
//	Release ReleaseStrategy // how a lock is deleted only if it holds its value
//	Extend  ExtendStrategy  // how its expiry is reset only if it holds its value
//	Digest  DigestStrategy  // how a value above Options.DigestThreshold is compared
//	DelIfEq bool            // DELIFEQ answered: a refused DELEX falls back to it, not to Lua
//	ScriptsDenied string    // the ACL's refusal of scripts (EVALSHA, EVAL); empty when they may run
//	ACLRefused string       // commands the probe found refused by the ACL, e.g. "DELEX DIGEST"
//	AnnounceDenied string   // a cache's announcement channel refused (cache only)
//	HandoffDenied string    // this Client's hand-off script refused (lock only)
//	NearDenied string       // CLIENT TRACKING refused to a cache's near cache (cache only)
//
// With ScriptsDenied set, the strategies that need no script work as
// usual; an operation that would need one fails at once with
// ErrPermission, before it takes anything. ACLRefused names the commands
// that would have spared a script where the server offers them. Each
// *Denied field holds the server's reply: with AnnounceDenied, processes
// waiting for a cache's rebuild poll instead of being told; with
// HandoffDenied, waiters poll (see WithRetry) and the script is
// tried again a minute later; with NearDenied, the near cache stays off
// and asks again a minute later.
type Capabilities = redisx.Capabilities

// Close ends the Client's background work and waits for it: the
// capability re-probe it may run beside a call (see Capabilities), and
// the pub/sub connections its waiting Obtains share (WithRetry). Calls
// after Close still work, with what was learnt of the server, but start
// no background work: waiters poll. It does not close the Redis client,
// which is the caller's. Calling it again does nothing.
func (c *Client) Close() {
	c.conn.Close()
	c.wakeHub().Close() // made if it was not: later waiters subscribe nothing
}
