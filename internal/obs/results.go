package obs

import (
	"errors"

	"github.com/hotkv/stampede/cache"
)

// LoadResults returns the result labels of a load's duration, indexed by
// LoadResult: ok, not-found, error.
func LoadResults() []string { return []string{"ok", "not-found", "error"} }

// LoadResult returns the index in LoadResults of a load that ended with
// err (an EventLoad's Err).
func LoadResult(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, cache.ErrNotFound):
		return 1
	}
	return 2
}

// WaitResults returns the result labels of a wait's duration, indexed by
// WaitResult: ok, timeout, error.
func WaitResults() []string { return []string{"ok", "timeout", "error"} }

// WaitResult returns the index in WaitResults of a wait that ended with
// err (an EventWait's Err).
func WaitResult(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, cache.ErrWaitTimeout):
		return 1
	}
	return 2
}

// Chain returns an Observer that calls each non-nil observer in turn, nil
// when all are nil, and the one observer when only one is not nil.
func Chain[E any](observers ...func(E)) func(E) {
	var fs []func(E)
	for _, f := range observers {
		if f != nil {
			fs = append(fs, f)
		}
	}
	switch len(fs) {
	case 0:
		return nil
	case 1:
		return fs[0]
	}
	return func(e E) {
		for _, f := range fs {
			f(e)
		}
	}
}
