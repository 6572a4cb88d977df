package cache

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/internal/redisx"
)

// GetOrLoadMany's read: every key in one round trip. A single server gets
// one MGET; a Redis Cluster one MGET per hash slot (MGET of keys in
// several slots is refused with CROSSSLOT), all in one pipeline, which
// go-redis sends to each node at once; any other client (a Ring, a
// wrapper) one GET per key in one pipeline. With the near cache trusted,
// the pipeline asks each key's PTTL too, and the read fills the near cache
// as fetch does.

// errCallerDone is readMany's error when the caller's ctx ended.
var errCallerDone = errors.New("cache: caller done")

// manyRead is what the read found of one key.
type manyRead struct {
	raw   []byte
	found bool
	done  time.Time // when the reply came
}

// readMany reads the value keys ks in one round trip. Its error is
// errCallerDone when ctx ended, else a failed server's.
//
// With targeted tracking the keys that fill the near cache are read
// through their node's reader (see tracking): one pipeline per reader,
// sent at once; the keys whose node has no reader now are read through
// the caller's client without a fill.
func (c *Cache) readMany(ctx context.Context, ks []keys) ([]manyRead, error) {
	n := c.near
	if n == nil || !c.track.active() {
		return c.readVia(ctx, nil, ks, nil)
	}
	tickets := make([]nearTicket, len(ks))
	for i, k := range ks {
		tickets[i] = n.begin(k.tag)
	}
	type group struct {
		src     *redis.Client // nil: the caller's client
		fill    bool
		idx     []int
		tickets []nearTicket
	}
	var groups []*group
	of := map[*redis.Client]*group{}
	var plain *group // keys read without a fill
	for i, k := range ks {
		src, ok := c.track.fillSource(ctx, k.value)
		if !ok {
			n.finish(tickets[i], nil)
			if plain == nil {
				plain = &group{}
				groups = append(groups, plain)
			}
			plain.idx = append(plain.idx, i)
			continue
		}
		g := of[src]
		if g == nil {
			g = &group{src: src, fill: true}
			of[src] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		g.tickets = append(g.tickets, tickets[i])
	}
	if len(groups) == 1 && len(groups[0].idx) == len(ks) {
		g := groups[0]
		return c.readVia(ctx, g.src, ks, g.tickets)
	}
	rs := make([]manyRead, len(ks))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for gi, g := range groups {
		wg.Go(func() {
			sub := make([]keys, len(g.idx))
			for j, i := range g.idx {
				sub[j] = ks[i]
			}
			var ts []nearTicket
			if g.fill {
				ts = g.tickets
			}
			got, err := c.readVia(ctx, g.src, sub, ts)
			errs[gi] = err
			for j, i := range g.idx {
				if err == nil {
					rs[i] = got[j]
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return rs, nil
}

// readVia reads ks in one pipeline on src (nil: the caller's client),
// filling the near cache under tickets (one per key; nil: no fill). A
// failed reader (closed by a reconnect, a slot moved) reads again through
// the caller's client, without a fill.
func (c *Cache) readVia(ctx context.Context, src *redis.Client, ks []keys, tickets []nearTicket) ([]manyRead, error) {
	fill := tickets != nil
	sent := time.Now()
	var pipe redis.Pipeliner
	if src != nil {
		pipe = src.Pipeline()
	} else {
		pipe = c.rc.Pipeline()
	}
	pr := c.queueReads(ctx, pipe, ks, fill)
	_ = redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
	rs, failed := pr.results(len(ks), time.Now())
	if fill {
		for i, t := range tickets {
			var e *nearEntry
			if failed == nil && rs[i].found {
				e = c.nearEntry(rs[i].raw, nil, pr.ttls[i], sent)
			}
			c.near.finish(t, e)
		}
	}
	if failed != nil {
		if redisx.CallerDone(ctx) {
			return nil, errCallerDone
		}
		if src != nil {
			return c.readVia(ctx, nil, ks, nil)
		}
		return nil, failed
	}
	return rs, nil
}

// pipeRead is the commands readVia queued in one pipeline for its keys.
type pipeRead struct {
	groups [][]int              // the keys' indexes by MGET (slotGroups)
	mgets  []*redis.SliceCmd    // by group; nil for the nil group
	gets   []*redis.StringCmd   // the nil group's: one GET per key
	ttls   []*redis.DurationCmd // with a fill: each key's PTTL
}

// queueReads queues the reads of ks on pipe: an MGET per slot group, or a
// GET per key, and with fill each key's PTTL.
func (c *Cache) queueReads(ctx context.Context, pipe redis.Pipeliner, ks []keys, fill bool) *pipeRead {
	pr := &pipeRead{groups: c.slotGroups(ks)}
	pr.mgets = make([]*redis.SliceCmd, len(pr.groups))
	for g, idx := range pr.groups {
		if idx == nil { // no grouping: one GET per key
			pr.gets = make([]*redis.StringCmd, len(ks))
			for i, k := range ks {
				pr.gets[i] = pipe.Get(ctx, k.value)
			}
			continue
		}
		names := make([]string, len(idx))
		for j, i := range idx {
			names[j] = ks[i].value
		}
		pr.mgets[g] = pipe.MGet(ctx, names...)
	}
	if fill {
		pr.ttls = make([]*redis.DurationCmd, len(ks))
		for i, k := range ks {
			pr.ttls[i] = pipe.PTTL(ctx, k.value)
		}
	}
	return pr
}

// results returns what the pipeline found of each of its n keys, its
// reply come at done, and the error of a failed read (the last one met).
func (pr *pipeRead) results(n int, done time.Time) (rs []manyRead, failed error) {
	rs = make([]manyRead, n)
	for g, idx := range pr.groups {
		if idx == nil {
			for i, cmd := range pr.gets {
				raw, err := cmd.Bytes()
				switch {
				case err == nil:
					rs[i] = manyRead{raw: raw, found: true}
				case !redisx.IsNil(err):
					failed = err
				}
			}
			continue
		}
		vals, err := pr.mgets[g].Result()
		if err != nil {
			failed = err
			continue
		}
		for j, i := range idx {
			if s, ok := vals[j].(string); ok {
				rs[i] = manyRead{raw: []byte(s), found: true}
			}
		}
	}
	for i := range rs {
		rs[i].done = done
	}
	return rs, failed
}

// slotGroups returns the indexes of ks grouped for MGET: one group for a
// single server, one per hash slot on a Redis Cluster, and a nil group
// (one GET each) for any other client.
func (c *Cache) slotGroups(ks []keys) [][]int {
	switch c.rc.(type) {
	case *redis.Client:
		all := make([]int, len(ks))
		for i := range all {
			all[i] = i
		}
		return [][]int{all}
	case *redis.ClusterClient:
		bySlot := make(map[uint16]int)
		var groups [][]int
		for i, k := range ks {
			s := redisx.Slot(k.tag)
			g, ok := bySlot[s]
			if !ok {
				g = len(groups)
				bySlot[s] = g
				groups = append(groups, nil)
			}
			groups[g] = append(groups[g], i)
		}
		return groups
	}
	return [][]int{nil}
}
