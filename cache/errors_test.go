package cache_test

import (
	"errors"
	"testing"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/lock"
)

// One ErrInvalid across packages: a bad argument to either package matches
// both packages' ErrInvalid.
func TestErrInvalid_shared(t *testing.T) {
	if cache.ErrInvalid != lock.ErrInvalid {
		t.Fatal("cache.ErrInvalid is not lock.ErrInvalid")
	}
	_, cerr := cache.New(nil, nil)
	_, lerr := lock.New(nil, nil)
	for _, err := range []error{cerr, lerr} {
		if !errors.Is(err, cache.ErrInvalid) || !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("%v: does not match both ErrInvalid", err)
		}
	}
}
