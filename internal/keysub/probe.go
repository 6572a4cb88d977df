package keysub

import (
	"context"
	"sync/atomic"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// Probe learns once whether the server has sharded pub/sub (SPUBLISH and
// SSUBSCRIBE, Redis and Valkey >= 7). The zero value is ready to use; it is
// safe for concurrent use.
type Probe struct {
	state atomic.Int32 // 0 unknown, 1 the server has sharded pub/sub, 2 it has not
}

// Doer is what Sharded needs of a client.
type Doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// Sharded reports whether the server has sharded pub/sub, learnt with an
// SPUBLISH of an empty message on channel (which no subscriber takes for a
// message) the first time. Every client of one server learns the same, so
// publishers and subscribers agree. A refused SPUBLISH still says the
// server has it. An error other than a reply leaves the question open and
// answers false this time.
func (p *Probe) Sharded(ctx context.Context, c Doer, channel string) bool {
	switch p.state.Load() {
	case 1:
		return true
	case 2:
		return false
	}
	err := c.Do(ctx, "SPUBLISH", channel, "").Err()
	switch {
	case err == nil || redisx.IsNoPerm(err):
		p.state.Store(1)
		return true
	case redisx.IsReply(err):
		p.state.Store(2)
	}
	return false
}
