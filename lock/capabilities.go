package lock

import "github.com/hotkv/stampede/internal/redisx"

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
	// ExtendLua runs a compare-and-pexpire script. Every server with Lua.
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
	// client computed. Every server with Lua.
	DigestLua DigestStrategy = iota
	// DigestNative uses DELEX/SET ... IFDEQ with the server's XXH3 digest
	// (Redis >= 8.4).
	DigestNative
)

// String returns the comparison used, e.g. "IFDEQ (XXH3)".
func (s DigestStrategy) String() string { return redisx.DigestStrategy(s).String() }

// Capabilities is what a server was found to offer and the strategy chosen
// for each operation, as (*Client).Capabilities and
// (*cache.Cache).Capabilities report it. The zero value stands for the Lua
// fallbacks, which work on every server with scripting. A command the
// server refuses at run time downgrades the strategy in use, and the
// server is asked again a minute later.
type Capabilities struct {
	// Server and Version are the server's name and version as HELLO
	// reports them (e.g. "redis", "8.6.3"), for display; empty when
	// unknown.
	Server, Version string

	// Release is how a lock is deleted only if it holds its value.
	Release ReleaseStrategy

	// Extend is how a lock's expiry is reset only if it holds its value.
	Extend ExtendStrategy

	// Digest is how a value longer than Options.DigestThreshold is
	// compared.
	Digest DigestStrategy

	// DelIfEq reports that the server answers DELIFEQ: a DELEX it refuses
	// at run time falls back to DELIFEQ rather than to Lua.
	DelIfEq bool

	// ScriptsDenied is the server's reply when its ACL refuses scripts
	// (EVALSHA or EVAL) to the client's user, as the probe or a later
	// refusal found; empty when scripts may run. The strategies that need
	// no script work as usual; an operation that would need one fails at
	// once with an error matching ErrPermission, before it takes
	// anything.
	ScriptsDenied string

	// ACLRefused lists the commands the probe found refused by the ACL,
	// space-separated (e.g. "DELEX DIGEST"): those that would have spared
	// a script where the server offers them. Empty when none was.
	ACLRefused string

	// AnnounceDenied is the server's reply when it refused a cache's
	// announcement channel ((S)SUBSCRIBE or (S)PUBLISH): processes waiting
	// for a rebuild then poll instead of being told. Only
	// (*cache.Cache).Capabilities fills it in.
	AnnounceDenied string

	// HandoffDenied is the server's reply when it refused this Client's
	// hand-off script (an ACL without a command it calls, or a server
	// without one): waiters then poll (see WithRetry), and the script is
	// tried again a minute later. Only (*Client).Capabilities and
	// CapabilitiesFor fill it in.
	HandoffDenied string

	// NearDenied is the server's reply when it refused CLIENT TRACKING to
	// a cache's near cache, which then stays off and asks again a minute
	// later. Only (*cache.Cache).Capabilities fills it in.
	NearDenied string
}

// String describes the server and the chosen strategies in one line, e.g.
// "redis 8.6.3: release=DELEX IFEQ extend=SET IFEQ digest=IFDEQ (XXH3)",
// followed by what is refused ("scripts=denied", "handoff=denied", ...).
func (c Capabilities) String() string { return redisx.Mirror[redisx.Capabilities](c).String() }
