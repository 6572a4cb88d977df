package lock

import (
	"errors"

	"github.com/hotkv/stampede/internal/redisx"
)

// ErrNotObtained is returned when the lock is held by someone else (and,
// with a retry strategy, stayed held until the wait ended).
var ErrNotObtained = errors.New("lock: not obtained")

// ErrNotHeld is returned when an operation needs the caller's own lock but
// the key has expired, been released, or is held by another owner. The
// key is left as it is.
var ErrNotHeld = errors.New("lock: not held")

// ErrNotPublished is matched by the error of a ReplaceAndPublish that
// replaced the lock but did not publish its message with the write: the
// value is stored, and the error says why the message was not sent (the
// server refused the publish, or cannot run the write and the publish as
// one script for the client's user, channel and key).
var ErrNotPublished = errors.New("lock: replaced, message not published")

// ErrLost is the cause (see context.Cause) with which Do and RunOnce cancel
// the work's context when the lock is lost or can no longer be kept: the
// key was taken or deleted, refreshing it failed until it would expire, or
// the maximum hold passed.
var ErrLost = errors.New("lock: lost")

// ErrForeignValue is returned by Inspect when the key holds a value that
// this package did not write.
var ErrForeignValue = errors.New("lock: key holds a value not written by a stampede lock")

// ErrInvalid is matched (errors.Is) by every error about a bad argument or
// option that a stampede package returns, this one and the others (cache,
// middleware, gocronlock, compress); such errors are returned before any
// server call. Their text names the package, the argument as the caller
// spells it and its value, e.g. `lock: ttl 0s for key "k" is below 1ms`.
var ErrInvalid = redisx.ErrInvalid

// invalid returns an error matching ErrInvalid whose text is "lock: " and
// the formatted message, which names the argument and its value.
func invalid(format string, args ...any) error { return redisx.Invalid("lock", format, args...) }

// ErrPermission is matched by errors caused by the server's ACL refusing
// the client's user a command, key or channel that the operation needs
// (see docs/permissions.md). It is not transient: the error
// names what was refused and what would work. Where a refusal can be known
// in advance (scripts refused, and the operation needs one on this
// server), Obtain returns it before taking the lock, so that no lock is
// left that could not be released.
var ErrPermission = redisx.ErrPermission
