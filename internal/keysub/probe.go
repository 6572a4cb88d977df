package keysub

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// Probe learns whether the server has sharded pub/sub (SPUBLISH and
// SSUBSCRIBE, Redis and Valkey >= 7). The zero value is ready to use; it is
// safe for concurrent use.
type Probe struct {
	// Recheck is how long a "no" stands before the server is asked again
	// (a proxy or a server upgraded in place may gain the command). Zero
	// means redisx.Recheck. Set it before the first use.
	Recheck time.Duration

	state atomic.Int32 // 0 unknown, 1 the server has sharded pub/sub, 2 it refused SPUBLISH
	at    atomic.Int64 // when state became 2 (Unix ns)
}

// Doer is what Sharded needs of a client.
type Doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// Sharded reports whether the server has sharded pub/sub, learnt with an
// SPUBLISH of an empty message on channel (which no subscriber takes for a
// message). Every client of one server learns the same, so publishers and
// subscribers agree. A "yes" is kept: an SPUBLISH that ran, or one the ACL
// refused (the server has it). A "no" is kept only for a definite refusal
// (an unknown command, see redisx.IsRefusal), and only for Recheck. Any
// other error (BUSY, OOM, LOADING, a timeout, a broken connection) leaves
// the question open: it answers false this time and asks again next time.
func (p *Probe) Sharded(ctx context.Context, c Doer, channel string) bool {
	switch p.state.Load() {
	case 1:
		return true
	case 2:
		if time.Since(time.Unix(0, p.at.Load())) < p.recheck() {
			return false
		}
	}
	err := c.Do(ctx, "SPUBLISH", channel, "").Err()
	switch {
	case err == nil || redisx.IsNoPerm(err):
		p.state.Store(1)
		return true
	case redisx.IsRefusal(err):
		p.at.Store(time.Now().UnixNano())
		p.state.CompareAndSwap(0, 2)
	}
	return false
}

func (p *Probe) recheck() time.Duration {
	if p.Recheck > 0 {
		return p.Recheck
	}
	return redisx.Recheck
}
