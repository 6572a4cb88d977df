package redisx

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The strategies and Capabilities here are this module's own; package lock
// declares their public counterparts (lock.Capabilities, lock.ReleaseLua,
// ...), with the same fields and the strategies numbered alike, and Mirror
// converts between the two.

// ReleaseStrategy is how a value (a lock, a cache's claim) is deleted only
// if it still holds what the caller wrote.
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
func (s ReleaseStrategy) String() string {
	switch s {
	case ReleaseDelex:
		return "DELEX IFEQ"
	case ReleaseDelIfEq:
		return "DELIFEQ"
	case ReleaseLua:
		return "Lua"
	}
	return fmt.Sprintf("ReleaseStrategy(%d)", uint8(s))
}

// ExtendStrategy is how the expiry of a value is reset only if it still
// holds what the caller wrote. No server has a conditional PEXPIRE.
type ExtendStrategy uint8

const (
	// ExtendLua runs a compare-and-pexpire script.
	ExtendLua ExtendStrategy = iota
	// ExtendSetIfEq sends SET key value IFEQ value PX ms (Redis >= 8.4,
	// Valkey >= 8.1).
	ExtendSetIfEq
)

// String returns the command used, e.g. "SET IFEQ".
func (s ExtendStrategy) String() string {
	switch s {
	case ExtendSetIfEq:
		return "SET IFEQ"
	case ExtendLua:
		return "Lua"
	}
	return fmt.Sprintf("ExtendStrategy(%d)", uint8(s))
}

// DigestStrategy is how a value longer than the digest threshold (lock's
// Options.DigestThreshold) is compared without sending it back.
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
func (s DigestStrategy) String() string {
	switch s {
	case DigestNative:
		return "IFDEQ (XXH3)"
	case DigestLua:
		return "Lua (SHA-1)"
	}
	return fmt.Sprintf("DigestStrategy(%d)", uint8(s))
}

// Capabilities is what a server was found to offer and the strategy chosen
// for each operation, which lock.(*Client).Capabilities and
// cache.(*Cache).Capabilities report as a lock.Capabilities (see Mirror).
// The zero value selects the Lua fallbacks, which work on every server
// with scripting.
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
	// refusal found; empty when scripts may run or nobody asked (forced
	// Capabilities). The strategies above that need no script work as
	// usual; an operation that would need one fails at once with
	// ErrPermission, before it takes anything.
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
	// of its hand-off channel instead (see lock.WithRetry).
	AnnounceDenied string

	// HandoffDenied is the server's reply when it refused the hand-off
	// script of a lock Client (an ACL without a command it calls, or a
	// server without one; see lock.WithRetry): waiters then poll, and
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
func (c Capabilities) String() string {
	who := strings.TrimSpace(c.Server + " " + c.Version)
	if who == "" {
		who = "server"
	}
	s := fmt.Sprintf("%s: release=%s extend=%s digest=%s", who, c.Release, c.Extend, c.Digest)
	if c.ScriptsDenied != "" {
		s += " scripts=denied"
	}
	if c.AnnounceDenied != "" {
		s += " announcements=denied"
	}
	if c.HandoffDenied != "" {
		s += " handoff=denied"
	}
	if c.NearDenied != "" {
		s += " near=denied"
	}
	return s
}

// noScriptSHA is the SHA-1 of a script nobody loads: EVALSHA with it
// answers NOSCRIPT where scripts may run, NOPERM where the ACL refuses
// them.
const noScriptSHA = "ffffffffffffffffffffffffffffffffffffffff"

// probe learns what the server offers with one pipeline of no-op commands
// on a key that does not exist, named prefix followed by random hex (the
// caller's own key and ":probe:", so that an ACL that lets the user at its
// keys lets it at the probe's). A definite refusal (IsRefusal) means "not
// offered", except an ACL refusal of the key, which fails the probe with a
// *PermissionError; any other error reply or a transport error fails it
// too, so that it is tried again later instead of settling on the slowest
// strategies because of one passing reply.
func probe(ctx context.Context, c Client, prefix string) (Capabilities, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	key := prefix + hex.EncodeToString(rnd[:])

	pipe := c.Pipeline()
	hello := pipe.Do(ctx, "HELLO")
	delex := pipe.Do(ctx, "DELEX", key, "IFEQ", "x")
	delifeq := pipe.Do(ctx, "DELIFEQ", key, "x")
	setifeq := pipe.Do(ctx, "SET", key, "x", "IFEQ", "y", "PX", 1000)
	delexd := pipe.Do(ctx, "DELEX", key, "IFDEQ", "0000000000000000")
	digest := pipe.Do(ctx, "DIGEST", key)
	evalsha := pipe.Do(ctx, "EVALSHA", noScriptSHA, 0)
	eval := pipe.Do(ctx, "EVAL", "return 0", 0)
	if err := Exec(ctx, pipe); err != nil {
		// The connection failed, not a command: nothing was learnt.
		return Capabilities{}, fmt.Errorf("probe server: %w", err)
	}

	if err := probeFailed([]*redis.Cmd{hello, delex, delifeq, setifeq, delexd, digest, evalsha, eval}, evalsha, key, prefix); err != nil {
		return Capabilities{}, err
	}

	var caps Capabilities
	caps.Server, caps.Version = helloFields(hello.Val())
	zero := func(cmd interface {
		Int64() (int64, error)
	}) bool {
		n, err := cmd.Int64()
		return err == nil && n == 0
	}
	if zero(delifeq) {
		caps.DelIfEq = true
		caps.Release = ReleaseDelIfEq
	}
	if zero(delex) {
		caps.Release = ReleaseDelex
	}
	if IsNil(setifeq.Err()) {
		caps.Extend = ExtendSetIfEq
	} else if setifeq.Err() == nil {
		// The server ignored IFEQ and wrote the key: it must not be trusted
		// with the conditional form, and the probe key must not linger.
		_ = c.Del(ctx, key).Err()
	}
	if zero(delexd) && IsNil(digest.Err()) {
		caps.Digest = DigestNative
	}
	for _, cmd := range []*redis.Cmd{evalsha, eval} {
		if IsNoPerm(cmd.Err()) && caps.ScriptsDenied == "" {
			caps.ScriptsDenied = cmd.Err().Error()
		}
	}
	var refused []string
	for _, p := range []struct {
		name string
		cmd  *redis.Cmd
	}{{"DELEX", delex}, {"DELIFEQ", delifeq}, {"SET", setifeq}, {"DIGEST", digest}} {
		if IsNoPerm(p.cmd.Err()) {
			refused = append(refused, p.name)
		}
	}
	caps.ACLRefused = strings.Join(refused, " ")
	return caps, nil
}

// probeFailed returns the error that fails the probe, if one of its
// replies cmds (evalsha among them) says nothing about what the server
// offers, or the ACL refused the probe's own key.
func probeFailed(cmds []*redis.Cmd, evalsha *redis.Cmd, key, prefix string) error {
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && !IsNil(err) && !IsReply(err) {
			return fmt.Errorf("probe server: %w", err)
		}
		// Only a definite refusal says "not offered"; any other reply
		// (BUSY, OOM, LOADING, ...) says nothing about what the server
		// offers, and settling on it would last (see IsRefusal). NOSCRIPT
		// is EVALSHA's answer where scripts may run.
		if err := cmd.Err(); IsReply(err) && !IsRefusal(err) && !(cmd == evalsha && isNoScript(err)) {
			return fmt.Errorf("probe server: %w", err)
		}
		// The probe's own key refused: what the server offers is unknown,
		// and the caller could not use its key either.
		if err := cmd.Err(); IsNoPerm(err) && strings.Contains(err.Error(), "key") {
			return Denied(fmt.Sprintf("capability probe on key %q", key), err,
				fmt.Sprintf("grant the user access to keys starting %q (see docs/permissions.md)", prefix))
		}
	}
	return nil
}

func isNoScript(err error) bool { return IsReply(err) && strings.HasPrefix(err.Error(), "NOSCRIPT") }

// helloFields reads "server" and "version" from a HELLO reply, which is a
// map in RESP3 and a flat list in RESP2.
func helloFields(v any) (server, version string) {
	get := func(k, val any) {
		ks, _ := k.(string)
		vs, _ := val.(string)
		switch ks {
		case "server":
			server = vs
		case "version":
			version = vs
		}
	}
	switch m := v.(type) {
	case map[any]any:
		for k, val := range m {
			get(k, val)
		}
	case []any:
		for i := 0; i+1 < len(m); i += 2 {
			get(m[i], m[i+1])
		}
	}
	return server, version
}
