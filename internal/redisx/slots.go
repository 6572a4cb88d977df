package redisx

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// reloadSlotsEvery is the least time between two slot map reloads that
// Conn.ReloadSlots asks of its Cluster client.
const reloadSlotsEvery = time.Second

// ReloadSlots asks the Conn's client, if it is a *redis.ClusterClient, to
// reload its slot map (CLUSTER SLOTS, in the background) when err is a
// transport error (IsTransport): at most once a second per Conn.
//
// Why: when a master dies, go-redis's cluster client keeps sending its
// slots' commands to the dead address until a MOVED reply (none comes from
// a dead node) or its own refresh a minute later, so a cache would fail
// open, and every write fail, for up to a minute after the replica took
// over. An error reply is not a reason: the node answered, and a MOVED
// already makes go-redis reload.
func (cn *Conn) ReloadSlots(err error) {
	if !IsTransport(err) {
		return
	}
	c, _ := unforce(cn.c, nil)
	cc, ok := c.(*redis.ClusterClient)
	if !ok || cc == nil {
		return
	}
	now := time.Now().UnixNano()
	prev := cn.slotsReloaded.Load()
	if prev != 0 && now-prev < int64(reloadSlotsEvery) || !cn.slotsReloaded.CompareAndSwap(prev, now) {
		return
	}
	cc.ReloadState(context.Background())
}
