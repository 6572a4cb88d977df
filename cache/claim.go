package cache

import (
	"context"

	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/lockvalue"
	"github.com/hotkv/stampede/lock"
)

// The one claim protocol, for every rebuild (miss.go, stale.go,
// many_load.go): claim → load (keeping the claim alive) → write in place
// of the claim, or conditionally beside the rebuild lock → announce →
// release. Claims and rebuild locks are taken, kept, replaced and
// released through package lock alone; this package only reads a
// holder's token, to know which announcement ends a wait.

// claim takes the lock on name (the value key: a miss's claim; k.lock():
// the rebuild lock beside a stored value) for LockTTL, in one SET NX PX
// GET sent with this process's concurrent claims (lock.Client.ObtainMany).
// Where another holds it, l is nil and holder is the holder's token, ""
// when what name holds is no lock value (on the value key: an entry
// stored meanwhile).
func (c *Cache) claim(ctx context.Context, name string) (l *lock.Lock, holder string, err error) {
	tries, err := c.locks.ObtainMany(ctx, []string{name}, c.s.lockTTL)
	if err != nil {
		return nil, "", err
	}
	t := tries[0]
	if t.Err != nil || t.Lock != nil {
		return t.Lock, "", t.Err
	}
	c.n.contention.Add(1)
	if v, ok := lockvalue.Decode(t.Held); ok && !codec.IsEntry([]byte(t.Held)) { // as decide tells them apart
		return nil, v.Token, nil
	}
	return nil, "", nil
}
