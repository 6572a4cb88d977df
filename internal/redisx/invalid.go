package redisx

import (
	"errors"
	"fmt"
)

// ErrInvalid is matched (errors.Is) by every error about bad arguments or
// options that stampede returns, from any package; lock.ErrInvalid is this
// value. Such errors are returned before any server call.
var ErrInvalid = errors.New("invalid argument")

// invalidError is a bad argument or option: its text names the package and
// the argument ("cache: Expiry.Stale -1s is negative") and it matches
// ErrInvalid.
type invalidError struct{ msg string }

func (e *invalidError) Error() string { return e.msg }

// Is reports whether target is ErrInvalid.
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// Invalid returns an error matching ErrInvalid whose text is pkg, a colon,
// and the formatted message, which names the argument and what is wrong
// with it: Invalid("cache", "Expiry.Stale %v is negative", d).
func Invalid(pkg, format string, args ...any) error {
	return &invalidError{pkg + ": " + fmt.Sprintf(format, args...)}
}
