package redisx

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// ErrPermission is matched (errors.Is) by every error that stampede
// returns because the server's ACL refused a command, a key or a channel
// to the client's user. lock.ErrPermission and cache.ErrPermission are
// this error.
var ErrPermission = errors.New("permission denied by the server (ACL)")

// PermissionError is a refusal by the server's ACL, with what stampede was
// doing and what would make it work. It matches ErrPermission and unwraps
// to the server's reply (nil when stampede refused up front, knowing the
// server would).
type PermissionError struct {
	Op    string // what was refused, e.g. "release (compare-and-delete)"
	Reply string // the server's NOPERM reply
	Fix   string // what would work instead
	err   error
}

func (e *PermissionError) Error() string {
	msg := ErrPermission.Error() + ": " + e.Op
	if e.Reply != "" {
		msg += ": " + e.Reply
	}
	if e.Fix != "" {
		msg += "; " + e.Fix
	}
	return msg
}

// Is reports whether target is ErrPermission.
func (e *PermissionError) Is(target error) bool { return target == ErrPermission }

// Unwrap returns the server's reply, if there was one.
func (e *PermissionError) Unwrap() error { return e.err }

// IsNoPerm reports whether err is the server's ACL refusal: a NOPERM
// reply (command, key or channel not permitted to the user), or the error
// of a script whose command the ACL refused, which Redis 7.0 words "ERR
// The user executing the script can't …" and Redis >= 7.2 and Valkey "ERR
// ACL failure in script: …".
func IsNoPerm(err error) bool {
	if !IsReply(err) {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "NOPERM") ||
		strings.HasPrefix(msg, "ERR The user executing the script can't") ||
		strings.HasPrefix(msg, "ERR ACL failure in script")
}

// Denied returns err as a *PermissionError for op if it is a NOPERM reply,
// else err unchanged. fix says what would work; "" means "grant what the
// reply names".
func Denied(op string, err error, fix string) error {
	if !IsNoPerm(err) {
		return err
	}
	if fix == "" {
		fix = "grant the user the command, key or channel the reply names (see docs/permissions.md)"
	}
	return &PermissionError{Op: op, Reply: err.Error(), Fix: fix, err: err}
}

// grantScripts is the first half of every fix for a refused script.
const grantScripts = "grant the user +evalsha and +eval (or +@scripting) and the commands the script calls"

// Op names a conditional operation whose need of a script Check
// reports.
type Op uint8

const (
	OpRelease Op = iota // DeleteIfEqual
	OpExtend            // ExpireIfEqual
	OpSet               // SetIfEqual
)

func (o Op) String() string {
	switch o {
	case OpRelease:
		return "release"
	case OpExtend:
		return "refresh"
	case OpSet:
		return "conditional write"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// scriptFor returns the name and the script-free alternative of op on a
// value of n bytes when it needs a script on a server with caps, or ""
// when it needs none.
func (cn *Conn) scriptFor(caps Capabilities, op Op, n int) (name, instead string) {
	large := n > cn.threshold
	switch op {
	case OpRelease:
		if large && caps.Digest != DigestNative {
			return "release of a large value (compare-and-delete by SHA-1 script)",
				"use a server with DELEX IFDEQ (Redis >= 8.4), which needs no script" + cn.raise(n, caps.Release != ReleaseLua)
		}
		if !large && caps.Release == ReleaseLua {
			return "release (compare-and-delete script)",
				"use a server with DELEX IFEQ (Redis >= 8.4, Valkey >= 9.2) or DELIFEQ (Valkey 9.0, 9.1), which needs no script"
		}
	case OpExtend:
		if large && caps.Digest != DigestNative {
			return "refresh of a large value (compare-and-pexpire by SHA-1 script)",
				"use a server with SET IFDEQ (Redis >= 8.4), which needs no script" + cn.raise(n, caps.Extend == ExtendSetIfEq)
		}
		if !large && caps.Extend == ExtendLua {
			return "refresh (compare-and-pexpire script)",
				"use a server with SET IFEQ (Redis >= 8.4, Valkey >= 8.1), which needs no script"
		}
	case OpSet:
		if large && caps.Digest != DigestNative {
			return "conditional write over a large value (compare-and-set by SHA-1 script)",
				"use a server with SET IFDEQ (Redis >= 8.4), which needs no script" + cn.raise(n, caps.Extend == ExtendSetIfEq)
		}
		if !large && caps.Extend == ExtendLua {
			return "conditional write (compare-and-set script)",
				"use a server with SET IFEQ (Redis >= 8.4, Valkey >= 8.1), which needs no script"
		}
	}
	return "", ""
}

// raise suggests comparing a value of n bytes as it is, where the server
// has a native form for that (native).
func (cn *Conn) raise(n int, native bool) string {
	if !native {
		return ""
	}
	return fmt.Sprintf(", or raise DigestThreshold to at least %d bytes (the value is then compared as it is, with this server's native command)", n)
}

// Check returns a *PermissionError when op on key, for a value of n bytes,
// needs a script on this server and the server refuses scripts to the
// client's user; nil when it would run, and the probe's error when the
// server could not be asked. Callers check before they take something
// that only op can give back (a lock that only a conditional delete can
// free), so that a refusal leaves nothing behind.
func (cn *Conn) Check(ctx context.Context, key string, op Op, n int) error {
	caps, err := cn.CapabilitiesFor(ctx, key)
	if err != nil {
		return err
	}
	return cn.scriptDenied(caps, op, n)
}

func (cn *Conn) scriptDenied(caps Capabilities, op Op, n int) error {
	if caps.ScriptsDenied == "" {
		return nil
	}
	name, instead := cn.scriptFor(caps, op, n)
	if name == "" {
		return nil
	}
	return &PermissionError{Op: name, Reply: caps.ScriptsDenied, Fix: scriptFix(caps, instead)}
}

// scriptFix says what would spare a refused script: the commands the ACL
// refused to the probe (where the server offers them, they need none),
// granting scripts, or another server.
func scriptFix(caps Capabilities, instead string) string {
	var alts []string
	if caps.ACLRefused != "" {
		alts = append(alts, "grant the user "+strings.ToLower("+"+strings.ReplaceAll(caps.ACLRefused, " ", " +"))+
			" (refused to it; where the server offers them they need no script)")
	}
	alts = append(alts, grantScripts)
	if instead != "" {
		alts = append(alts, instead)
	}
	return strings.Join(alts, ", or ")
}

// CheckScripts returns a *PermissionError for op when the server refuses
// scripts to the client's user; for operations that always run a script
// (fenced Obtain). instead says what would work without one ("" for
// nothing).
func (cn *Conn) CheckScripts(ctx context.Context, key, op, instead string) error {
	caps, err := cn.CapabilitiesFor(ctx, key)
	if err != nil {
		return err
	}
	if caps.ScriptsDenied == "" {
		return nil
	}
	return &PermissionError{Op: op, Reply: caps.ScriptsDenied, Fix: scriptFix(Capabilities{}, instead)}
}

// isScriptRefusal reports whether err is the ACL's refusal of EVALSHA or
// EVAL itself, as opposed to a command or key inside the script (whose
// reply also mentions the script).
func isScriptRefusal(err error) bool {
	if !IsNoPerm(err) {
		return false
	}
	msg := strings.ToLower(err.Error())
	return strings.HasPrefix(msg, "noperm") &&
		(strings.Contains(msg, "'evalsha' command") || strings.Contains(msg, "'eval' command"))
}

// scriptErr turns a NOPERM reply to a script into a *PermissionError for
// op and remembers that scripts are refused, so that the next Check says
// so before anything is taken. Other errors are returned unchanged.
func (cn *Conn) scriptErr(caps Capabilities, op Op, n int, err error) error {
	if !IsNoPerm(err) {
		return err
	}
	msg := err.Error()
	if isScriptRefusal(err) {
		cn.downgrade(func(c *Capabilities) { c.ScriptsDenied = msg })
		name, instead := cn.scriptFor(caps, op, n)
		if name != "" {
			return &PermissionError{Op: name, Reply: msg, Fix: scriptFix(caps, instead), err: err}
		}
	}
	// A command the script calls, or the key: the reply names it.
	return Denied(op.String()+" (script)", err, "")
}
