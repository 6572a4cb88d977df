package redisx

import (
	"context"
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"
)

// Client is the part of a go-redis v9 client that a Conn uses; it has the
// method set of lock.RedisClient (the public packages declare their own
// interfaces, which convert to this one). Every go-redis UniversalClient
// satisfies it: *redis.Client (also when made by redis.NewFailoverClient),
// *redis.ClusterClient and *redis.Ring.
type Client interface {
	redis.Scripter
	Do(ctx context.Context, args ...any) *redis.Cmd
	Get(ctx context.Context, key string) *redis.StringCmd
	SetNX(ctx context.Context, key string, value any, expiration time.Duration) *redis.BoolCmd
	PTTL(ctx context.Context, key string) *redis.DurationCmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	Pipeline() redis.Pipeliner
}

// IsNilClient reports whether c is nil, including a typed nil such as a
// nil *redis.Client, which is not == nil but panics when used.
func IsNilClient(c Client) bool {
	if f, ok := c.(*Forced); ok {
		c = f.Client
	}
	if c == nil {
		return true
	}
	v := reflect.ValueOf(c)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

var (
	_ Client = (*redis.Client)(nil)
	_ Client = (*redis.ClusterClient)(nil)
	_ Client = (*redis.Ring)(nil)
	_ Client = (redis.UniversalClient)(nil)
)
