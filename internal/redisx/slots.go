package redisx

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// reloadSlotsEvery is the least time between two slot map reloads that
// ReloadSlots asks of one Cluster client.
const reloadSlotsEvery = time.Second

// slotReloads holds, per Cluster client, when ReloadSlots last asked it to
// reload (Unix ns, an *atomic.Int64), shared by every Cache and lock.Client
// on that client. An entry goes when its client is collected.
var slotReloads sync.Map // weak.Pointer[redis.ClusterClient] -> *atomic.Int64

// ReloadSlots asks c, if it is a *redis.ClusterClient, to reload its slot
// map (CLUSTER SLOTS, in the background) when err is a transport error
// (IsTransport): at most once a second per client.
//
// Why: when a master dies, go-redis's cluster client keeps sending its
// slots' commands to the dead address until a MOVED reply (none comes from
// a dead node) or its own refresh a minute later, so a cache would fail
// open, and every write fail, for up to a minute after the replica took
// over. An error reply is not a reason: the node answered, and a MOVED
// already makes go-redis reload.
func ReloadSlots(c Client, err error) {
	if !IsTransport(err) {
		return
	}
	c, _ = unforce(c, nil)
	cc, ok := c.(*redis.ClusterClient)
	if !ok || cc == nil {
		return
	}
	key := weak.Make(cc)
	v, ok := slotReloads.Load(key)
	if !ok {
		var loaded bool
		if v, loaded = slotReloads.LoadOrStore(key, new(atomic.Int64)); !loaded {
			runtime.AddCleanup(cc, func(k weak.Pointer[redis.ClusterClient]) { slotReloads.Delete(k) }, key)
		}
	}
	last := v.(*atomic.Int64)
	now := time.Now().UnixNano()
	prev := last.Load()
	if prev != 0 && now-prev < int64(reloadSlotsEvery) || !last.CompareAndSwap(prev, now) {
		return
	}
	cc.ReloadState(context.Background())
}
