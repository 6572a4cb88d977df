package middleware

import (
	"fmt"

	"github.com/hotkv/stampede/cache"
)

// ErrInvalid is cache.ErrInvalid (and lock.ErrInvalid): it is wrapped by
// every error New returns for bad arguments or options, so errors.Is
// matches it against any stampede package's bad-argument error.
var ErrInvalid = cache.ErrInvalid

// invalid returns an error about bad arguments or options, wrapping
// ErrInvalid.
func invalid(format string, args ...any) error {
	return fmt.Errorf("middleware: %w: "+format, append([]any{ErrInvalid}, args...)...)
}
