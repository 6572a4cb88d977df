package middleware

import (
	"errors"

	"github.com/hotkv/stampede/internal/redisx"
)

// invalid returns an error about bad arguments or options, matching
// lock.ErrInvalid.
func invalid(format string, args ...any) error {
	return redisx.Invalid("middleware", format, args...)
}

// errNotStored is the loader's error for a response that must not be
// stored or shared; every other waiter renders for itself.
type errNotStored struct{ reason string }

func (e errNotStored) Error() string { return "middleware: response not stored: " + e.reason }

// errFailedGraceful is the error of a render that failed (a 5xx) while
// the stored response it would replace was within its grace
// (Freshness.StaleIfError): nothing was sent, and the stored response
// answers. It is an errNotStored too.
type errFailedGraceful struct{ errNotStored }

func (e errFailedGraceful) Unwrap() error { return e.errNotStored }

// errEndsStored is the error of a render whose response may not be stored
// and ends the stored response the render refreshed (see httprule.Ends). It
// is an errNotStored too.
type errEndsStored struct{ errNotStored }

func (e errEndsStored) Unwrap() error { return e.errNotStored }

// errPurgedDuringRender is the reason of a render that a purge of one of
// its tags may have overtaken: it went to its own client only, and seen
// holds the epochs after that purge, for the render again (retryPurged).
type errPurgedDuringRender struct {
	errNotStored
	seen []tagRef
}

func (e errPurgedDuringRender) Unwrap() error { return e.errNotStored }

// errDeclined is a request's answer to a job it will not render: the
// loader renders in the background instead.
var errDeclined = errors.New("middleware: render in the background")

// Reasons of renders that failed (see renderFailed).
const (
	reasonPanicked  = "the handler panicked"
	reasonOutlasted = "the render outlasted the load timeout"
)
