package metrics

import (
	"errors"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/loader"
)

// LoadResults returns the result labels of a load's duration (a
// cache.EventLoad's), indexed by LoadResult: ok, not-found, error. Each
// call returns a new slice.
func LoadResults() []string { return []string{"ok", "not-found", "error"} }

// LoadResult returns the index in LoadResults of a load that ended with
// err (a cache.EventLoad's Err): not-found when err matches
// loader.ErrNotFound.
func LoadResult(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, loader.ErrNotFound):
		return 1
	}
	return 2
}

// WaitResults returns the result labels of a wait's duration (a
// cache.EventWait's), indexed by WaitResult: ok, timeout, error. Each
// call returns a new slice.
func WaitResults() []string { return []string{"ok", "timeout", "error"} }

// WaitResult returns the index in WaitResults of a wait that ended with
// err (a cache.EventWait's Err): timeout when err matches
// cache.ErrWaitTimeout.
func WaitResult(err error) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, cache.ErrWaitTimeout):
		return 1
	}
	return 2
}

// Chain returns an Observer (for the Options.Observer of package cache,
// lock or middleware) that calls each non-nil observer in turn: nil when
// all are nil, and the one observer when only one is not nil. The
// Observer it returns is as safe for concurrent use as the observers.
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
