package redisx

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Send sends one command with the concurrent calls of this Conn (see
// Batcher): only for commands that are safe in any order relative to
// other callers' commands, as the lock commands are.
func (cn *Conn) Send(ctx context.Context, args ...any) *redis.Cmd { return cn.batched(ctx, args...) }
