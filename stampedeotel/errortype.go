package stampedeotel

import (
	"context"
	"errors"
	"reflect"
	"sync"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/lock"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// What the error.type attribute of a failure says, as the semantic
// conventions ask: a low-cardinality name of what went wrong. A condition
// the packages know has a short name (knownName); an error that names its
// own type (an ErrorType() string method, the conventions' hook) has that
// name; any other has the Go type of the innermost error its plain
// wrappers wrap ("*net.OpError", "proto.RedisError"); and once a
// Telemetry has given maxErrorTypes such names, the later ones are
// otherErrorType.

// otherErrorType is error.type for a failure of no name the Telemetry
// can give.
const otherErrorType = "_OTHER"

// maxErrorTypes bounds the distinct error.type names one Telemetry gives
// besides the known ones, so that no series table grows without bound.
const maxErrorTypes = 50

// knownName returns the short name of a condition the packages know that
// err is, or "".
func knownName(err error) string {
	var panicked *loader.PanicError
	switch {
	case errors.As(err, &panicked):
		return "panic"
	case errors.Is(err, cache.ErrWaitTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, cache.ErrRemoteLoad):
		return "remote_load"
	case errors.Is(err, lock.ErrPermission):
		return "permission"
	case errors.Is(err, cache.ErrValueTooLarge):
		return "value_too_large"
	case errors.Is(err, cache.ErrClosed):
		return "closed"
	case errors.Is(err, lock.ErrLost):
		return "lost"
	case errors.Is(err, lock.ErrNotHeld):
		return "not_held"
	case errors.Is(err, lock.ErrForeignValue):
		return "foreign_value"
	}
	return ""
}

// errorTypes gives the error.type names of one Telemetry. The zero value
// is ready to use; it is safe for concurrent use.
type errorTypes struct {
	mu    sync.RWMutex        // guards names
	names map[string]struct{} // the names given besides the known ones; at most maxErrorTypes
}

// of returns the error.type of err (otherErrorType for nil, an Event
// of a failed kind that carries no error).
func (et *errorTypes) of(err error) string {
	if err == nil {
		return otherErrorType
	}
	if name := knownName(err); name != "" {
		return name
	}
	return et.bounded(typeName(err))
}

// bounded returns name if it is one of the first maxErrorTypes names
// asked for, else otherErrorType.
func (et *errorTypes) bounded(name string) string {
	if name == "" {
		return otherErrorType
	}
	et.mu.RLock()
	_, ok := et.names[name]
	full := len(et.names) >= maxErrorTypes
	et.mu.RUnlock()
	switch {
	case ok:
		return name
	case full:
		return otherErrorType
	}
	et.mu.Lock()
	defer et.mu.Unlock()
	if _, ok := et.names[name]; !ok {
		if len(et.names) >= maxErrorTypes {
			return otherErrorType
		}
		if et.names == nil {
			et.names = make(map[string]struct{})
		}
		et.names[name] = struct{}{}
	}
	return name
}

// typeName returns what an error in err's chain says its type is (its
// ErrorType method), else the Go type of the innermost error that err's
// plain wrappers wrap (fmt.Errorf's %w, the first error of errors.Join or
// of several %w): an error type that carries a cause of its own, such as
// *net.OpError, names the failure better than its cause.
func typeName(err error) string {
	var named interface{ ErrorType() string }
	if errors.As(err, &named) {
		if s := named.ErrorType(); s != "" {
			return s
		}
	}
	for range 100 { // a chain that long is a cycle
		var next error
		switch reflect.TypeOf(err).String() {
		case "*fmt.wrapError":
			next = errors.Unwrap(err)
		case "*fmt.wrapErrors", "*errors.joinError":
			if errs := err.(interface{ Unwrap() []error }).Unwrap(); len(errs) > 0 {
				next = errs[0]
			}
		}
		if next == nil {
			break
		}
		err = next
	}
	return reflect.TypeOf(err).String()
}

// failures holds the histogram options and span attributes of the
// failures of one series, by error.type, each made on first use: the
// names are bounded (see errorTypes), and so is the table. The zero value
// is not ready: use newFailures. It is safe for concurrent use.
type failures struct {
	base []attribute.KeyValue // the series' attributes

	mu sync.RWMutex // guards by
	by map[string]*byResult
}

func newFailures(base []attribute.KeyValue) *failures {
	return &failures{base: base, by: make(map[string]*byResult)}
}

// with returns what a failure of error.type name records: once made,
// without allocating.
func (f *failures) with(name string) *byResult {
	f.mu.RLock()
	r := f.by[name]
	f.mu.RUnlock()
	if r != nil {
		return r
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r := f.by[name]; r != nil {
		return r
	}
	kvs := append(f.base[:len(f.base):len(f.base)], keyErrorType.String(name))
	r = &byResult{record: []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kvs...))}, attrs: kvs}
	f.by[name] = r
	return r
}
