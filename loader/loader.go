// Package loader holds the loader function type used by the cache, the
// errors a loader may return, and helpers that wrap a loader with a time
// limit or retries.
package loader

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Func loads the value for a key, e.g. by running a query. It receives a
// context that is not any one caller's (see cache.GetOrLoad) and must
// return when that context ends.
type Func[V any] func(ctx context.Context) (V, error)

// ErrNotFound is returned by a loader when the value does not exist. The
// cache may remember it for Options.Expiry.Negative and returns it
// (matched by errors.Is) instead of running the loader again. It is never
// retried.
var ErrNotFound = errors.New("loader: not found")

// PanicError is what a panicking loader becomes (cache.GetOrLoad recovers
// the panic): every caller waiting for that load gets it, and the process
// goes on. WithRetry does not retry it.
type PanicError struct {
	Value any    // what the loader panicked with
	Stack []byte // the stack of the goroutine that panicked
}

// Error returns the panic value, on one line (a newline in it is written
// \n), so that a log line stays one line. The stack is in Stack.
func (p *PanicError) Error() string {
	return "loader: panic: " + strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(fmt.Sprint(p.Value))
}

// Unwrap returns the panic value if it is an error, else nil.
func (p *PanicError) Unwrap() error {
	if err, ok := p.Value.(error); ok {
		return err
	}
	return nil
}
