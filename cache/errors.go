package cache

import (
	"errors"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/lock"
)

// ErrMiss is returned by Get when there is no usable value for the key.
var ErrMiss = errors.New("cache: miss")

// ErrStale is returned by Get together with a value that is past its fresh
// time but within Expiry.Stale. (GetOrLoad serves such a value with a nil error and
// refreshes it in the background.)
var ErrStale = errors.New("cache: stale value")

// ErrWaitTimeout is returned when another process was rebuilding the value
// and did not finish within WaitTimeout (see Options.LoadOnWaitTimeout).
var ErrWaitTimeout = errors.New("cache: timed out waiting for another process to load the value")

// ErrRemoteLoad is returned to callers that waited for another process
// whose load failed; the message carries that process's error text.
var ErrRemoteLoad = errors.New("cache: load failed in another process")

// ErrBackendBusy is returned when a load for a capped backend (see
// Options.Backends) found every permit of the backend held, in every
// process, until the call's WaitTimeout passed (or its load's context
// ended); the loader did not run. The message names the backend and how
// long the load waited. Callers waiting in other processes for that load
// get it together with ErrRemoteLoad.
var ErrBackendBusy = errors.New("cache: backend busy")

// ErrValueTooLarge is returned when an encoded value exceeds
// Options.MaxValueSize; nothing is stored.
var ErrValueTooLarge = errors.New("cache: value too large")

// ErrClosed is returned by operations on a closed Cache.
var ErrClosed = errors.New("cache: closed")

// ErrPermission is lock.ErrPermission: it is matched by errors caused by
// the server's ACL refusing the client's user a command, key or channel
// the cache needs (see docs/permissions.md). GetOrLoad
// returns it at once, without claiming the key or running the loader, when
// a rebuild would need a script the server refuses; callers waiting in
// other processes for a rebuild whose write was refused get it together
// with ErrRemoteLoad.
var ErrPermission = lock.ErrPermission

// invalid returns an error about a bad argument or option, matching
// lock.ErrInvalid, returned before any server call.
func invalid(format string, args ...any) error {
	return redisx.Invalid("cache", format, args...)
}
