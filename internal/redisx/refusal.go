package redisx

import (
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Recheck is how long a remembered refusal stands before the refused
// command is tried again, so that an operator who grants a command or
// fixes an ACL sees the faster path come back without a restart.
const Recheck = time.Minute

// IsRefusal reports whether err is a definite refusal: an answer the same
// call would get again until an operator changes the server or its ACL,
// and so the only kind of error that may be remembered (and re-checked
// after Recheck). Those are
//
//   - the ACL's refusal of a command, key or channel (NOPERM, and its
//     forms inside a script; see IsNoPerm);
//   - a command, subcommand, option or arity the server does not have
//     ("ERR unknown command", "ERR unknown subcommand", "ERR syntax
//     error", "ERR wrong number of arguments", "ERR Unknown Redis command
//     called from script");
//   - scripting disabled.
//
// Everything else is a fact about this moment and must fail (or fall back
// for) one call only: BUSY, OOM, LOADING, MASTERDOWN, CLUSTERDOWN,
// TRYAGAIN, READONLY, MISCONF, NOREPLICAS, any other error raised inside a
// script (Redis >= 7 appends "script: <sha>" to those), a timeout, a
// connection error, a reply that is not RESP. Unknown replies count as
// transient: forgetting a refusal costs one more call, remembering a
// passing failure switches a feature off.
func IsRefusal(err error) bool {
	var re redis.Error
	if !IsReply(err) || !errors.As(err, &re) {
		return false
	}
	// The reply itself, not what wraps it.
	if IsNoPerm(re) || IsRefused(re) {
		return true
	}
	msg := re.Error()
	if strings.HasPrefix(msg, "ERR wrong number of arguments") ||
		// Redis: "ERR Unknown Redis command called from script", Valkey:
		// "ERR Unknown command called from script".
		strings.HasPrefix(msg, "ERR Unknown") && strings.Contains(msg, "command called from script") {
		return true
	}
	lower := strings.ToLower(msg)
	return strings.HasPrefix(lower, "err scripting is disabled") ||
		strings.HasPrefix(lower, "noscript scripting is disabled")
}
