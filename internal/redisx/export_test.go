package redisx

import "github.com/redis/go-redis/v9"

// IsNilErrForTest returns go-redis's nil reply, which only this package
// may name.
func IsNilErrForTest() error { return redis.Nil }
