package scenarios

import (
	"context"
	"fmt"
	"time"

	"github.com/hotkv/stampede/bench/baselines"
	"github.com/hotkv/stampede/cache"
	"github.com/redis/go-redis/v9"
	"github.com/viccon/sturdyc"
)

// Approaches returns the names of the approaches compared on the cache
// scenarios, stampede first.
func Approaches() []string { return []string{"stampede", "naive", "singleflight", "lock-poll"} }

// Item is the value the scenarios cache: a small record, about 300 bytes
// encoded.
type Item struct {
	ID       int64
	Name     string
	LoadedAt int64 // Unix ns
	Payload  []byte
}

func newItem(key string) Item {
	return Item{ID: 42, Name: key, LoadedAt: time.Now().UnixNano(), Payload: make([]byte, 256)}
}

// getter is one approach as a pod uses it.
type getter interface {
	get(ctx context.Context, key string, load func(context.Context) (Item, error)) (Item, error)
	close()
}

// approachOptions are what every approach needs to know.
type approachOptions struct {
	ns         string
	ttl, stale time.Duration // stale: stampede's Expiry.Stale
}

// newGetter builds approach name on rdb.
func newGetter(name string, rdb *redis.Client, o approachOptions) (getter, error) {
	switch name {
	case "stampede", nearApproach, broadcastApproach:
		opts := &cache.Options{Namespace: o.ns, Expiry: cache.ExpiryPolicy{Fresh: o.ttl, Stale: o.stale},
			WaitTimeout: 30 * time.Second, LoadTimeout: 30 * time.Second, Broadcast: name == broadcastApproach}
		if name == nearApproach {
			opts.Near = &cache.Near{MaxEntries: 100_000}
		}
		c, err := cache.New(rdb, opts)
		if err != nil {
			return nil, err
		}
		if name == nearApproach {
			if err := awaitNear(c, nearWait); err != nil {
				_ = c.Close()
				return nil, err
			}
		}
		return stampedeGetter{c}, nil
	case "naive":
		return baselineGetter{ns: o.ns, g: &baselines.Naive[Item]{RDB: rdb, TTL: o.ttl}}, nil
	case "singleflight":
		return baselineGetter{ns: o.ns, g: &baselines.Singleflight[Item]{Naive: baselines.Naive[Item]{RDB: rdb, TTL: o.ttl}}}, nil
	case "lock-poll":
		return baselineGetter{ns: o.ns, g: baselines.NewLockPoll[Item](rdb, o.ttl, 5*time.Second, 50*time.Millisecond, 30*time.Second)}, nil
	case sturdycApproach:
		return sturdycGetter{sturdyc.New[Item](1000, 8, o.ttl, 10)}, nil
	}
	return nil, fmt.Errorf("unknown approach %q", name)
}

type stampedeGetter struct{ c *cache.Cache }

func (s stampedeGetter) get(ctx context.Context, key string, load func(context.Context) (Item, error)) (Item, error) {
	return cache.GetOrLoad(ctx, s.c, key, load)
}

func (s stampedeGetter) close() { _ = s.c.Close() }

func (s stampedeGetter) nearHits() int64 { return int64(s.c.Stats().NearHits) }

type baselineGetter struct {
	ns string
	g  interface {
		Get(ctx context.Context, key string, load baselines.Loader[Item]) (Item, error)
	}
}

func (b baselineGetter) get(ctx context.Context, key string, load func(context.Context) (Item, error)) (Item, error) {
	return b.g.Get(ctx, b.ns+":"+key, load)
}

func (b baselineGetter) close() {}

// sturdycApproach is sturdyc v1.1.5 in each process (cold-gap only): a
// cache in the process's memory, no server, whose GetOrFetch coalesces a
// process's callers into one load. It loads once in every process.
const sturdycApproach = "sturdyc"

type sturdycGetter struct{ c *sturdyc.Client[Item] }

func (s sturdycGetter) get(ctx context.Context, key string, load func(context.Context) (Item, error)) (Item, error) {
	return s.c.GetOrFetch(ctx, key, load)
}

func (sturdycGetter) close() {}
