package lock

import (
	"context"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// RedisClient is what New accepts: the go-redis v9 methods a Client uses.
// Every go-redis UniversalClient satisfies it: *redis.Client (also when
// made by redis.NewFailoverClient), *redis.ClusterClient and *redis.Ring.
type RedisClient interface {
	redis.Scripter
	Do(ctx context.Context, args ...any) *redis.Cmd
	Get(ctx context.Context, key string) *redis.StringCmd
	SetNX(ctx context.Context, key string, value any, expiration time.Duration) *redis.BoolCmd
	PTTL(ctx context.Context, key string) *redis.DurationCmd
	Del(ctx context.Context, keys ...string) *redis.IntCmd
	Pipeline() redis.Pipeliner
}

var (
	_ RedisClient = (*redis.Client)(nil)
	_ RedisClient = (*redis.ClusterClient)(nil)
	_ RedisClient = (*redis.Ring)(nil)
	_ RedisClient = (redis.UniversalClient)(nil)

	_ redisx.Client = RedisClient(nil) // what the Client hands to internal/redisx
)

// Close ends the Client's background work and waits for it: the
// capability re-probe it may run beside a call (see Capabilities), and
// the pub/sub connections its waiting Obtains share (WithRetry). Calls
// after Close still work, with what was learnt of the server, but start
// no background work: waiters poll. It does not close the Redis client,
// which is the caller's. Calling it again does nothing.
func (c *Client) Close() {
	c.conn.Close()
	c.wakeHub().Close() // made if it was not: later waiters subscribe nothing
}
