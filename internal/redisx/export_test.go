package redisx

import "github.com/redis/go-redis/v9"

// IsNilErrForTest returns go-redis's nil reply, which only this package
// may name.
func IsNilErrForTest() error { return redis.Nil }

// Queued returns how many commands wait in b for the next pipeline.
func (b *Batcher) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// BatchDepth is how many pipelines a Batcher has in flight at most.
const BatchDepth = batchDepth

// DowngradeExtend makes cn use the Lua extension from now on, as a
// refused SET IFEQ does.
func (cn *Conn) DowngradeExtend() {
	cn.downgrade(func(c *Capabilities) { c.Extend = ExtendLua })
}
