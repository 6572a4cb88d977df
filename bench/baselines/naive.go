package baselines

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"
)

// Client is the part of a go-redis client the baselines use.
type Client interface {
	Get(ctx context.Context, key string) *redis.StringCmd
	Set(ctx context.Context, key string, value any, expiration time.Duration) *redis.StatusCmd
	SetNX(ctx context.Context, key string, value any, expiration time.Duration) *redis.BoolCmd
	redis.Scripter
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
)

// Loader computes a value; it is the expensive work.
type Loader[V any] func(ctx context.Context) (V, error)

// errMiss is returned by read when the key holds nothing.
var errMiss = errors.New("baselines: miss")

// Naive is cache-aside: GET, and on a miss load and SET with TTL. It is
// safe for concurrent use. The zero value is not usable: set RDB and TTL.
type Naive[V any] struct {
	RDB Client
	TTL time.Duration
}

// Get returns the cached value of key, loading and storing it on a miss.
// Concurrent misses each load: that is the stampede.
func (n *Naive[V]) Get(ctx context.Context, key string, load Loader[V]) (V, error) {
	v, err := read[V](ctx, n.RDB, key)
	if !errors.Is(err, errMiss) {
		return v, err
	}
	return loadAndStore(ctx, n.RDB, key, n.TTL, load)
}

// read GETs and decodes key; errMiss if it is absent.
func read[V any](ctx context.Context, rdb Client, key string) (V, error) {
	var v V
	raw, err := rdb.Get(ctx, key).Bytes()
	switch {
	case redisx.IsNil(err):
		return v, errMiss
	case err != nil:
		return v, fmt.Errorf("baselines: get %q: %w", key, err)
	}
	if err := msgpack.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("baselines: decode %q: %w", key, err)
	}
	return v, nil
}

// loadAndStore runs load and SETs its encoded result for ttl.
func loadAndStore[V any](ctx context.Context, rdb Client, key string, ttl time.Duration, load Loader[V]) (V, error) {
	v, err := load(ctx)
	if err != nil {
		return v, fmt.Errorf("baselines: load %q: %w", key, err)
	}
	b, err := msgpack.Marshal(v)
	if err != nil {
		return v, fmt.Errorf("baselines: encode %q: %w", key, err)
	}
	if err := rdb.Set(ctx, key, b, ttl).Err(); err != nil {
		return v, fmt.Errorf("baselines: set %q: %w", key, err)
	}
	return v, nil
}
