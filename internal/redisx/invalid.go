package redisx

import "errors"

// ErrInvalid is wrapped by every error about bad arguments or options that
// stampede returns, from any package: lock.ErrInvalid and cache.ErrInvalid
// are this value, so errors.Is matches either against any package's error.
var ErrInvalid = errors.New("invalid argument")
