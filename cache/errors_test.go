package cache_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/lock"
)

// One ErrInvalid across packages, lock's: a bad argument to cache matches
// it, and its text names the package and the argument, not the sentinel.
func TestErrInvalid_shared(t *testing.T) {
	_, cerr := cache.New(nil, nil)
	_, lerr := lock.New(nil, nil)
	for _, err := range []error{cerr, lerr} {
		if !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("%v: does not match lock.ErrInvalid", err)
		}
	}
	for _, err := range []error{cerr, lerr} {
		if strings.Contains(err.Error(), lock.ErrInvalid.Error()) {
			t.Errorf("%q: repeats the sentinel's text %q instead of naming the problem alone", err, lock.ErrInvalid)
		}
	}
	if !strings.HasPrefix(cerr.Error(), "cache: ") {
		t.Errorf("%q: want the cache: prefix", cerr)
	}
}

// ErrPermission is lock's: cache re-exports it, for the run-time refusals
// a cache's user checks for.
func TestErrPermission_shared(t *testing.T) {
	if cache.ErrPermission != lock.ErrPermission {
		t.Fatal("cache.ErrPermission is not lock.ErrPermission")
	}
}
