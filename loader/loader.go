// Package loader holds the loader function type used by the cache, the
// errors a loader may return, and helpers that wrap a loader with a time
// limit, retries or panic recovery.
package loader

import (
	"context"
	"errors"

	"github.com/hotkv/stampede/internal/flight"
)

// Func loads the value for a key, e.g. by running a query. It receives a
// context that is not any one caller's (see cache.GetOrLoad) and must
// return when that context ends.
type Func[V any] func(ctx context.Context) (V, error)

// ErrNotFound is returned by a loader when the value does not exist. The
// cache may remember it for Options.NegativeTTL and returns it (matched by
// errors.Is) instead of running the loader again. It is never retried.
var ErrNotFound = errors.New("loader: not found")

// PanicError is what a panicking loader becomes: every caller waiting for
// that load gets it, and the process goes on. It carries the panic value
// and stack, and unwraps to the value when that is an error.
type PanicError = flight.PanicError
