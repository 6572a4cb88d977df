package scenarios

import (
	"context"
	"crypto/rand"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/bench/report"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redisx"
)

// memValueBytes is the size of the values the memory scenario stores.
const memValueBytes = 256

// NearMemory measures, in a pod of its own, the heap the near cache takes
// for MemEntries values of 256 bytes, and then reads FloodKeys distinct
// keys once each through a near cache of FloodMax entries, watching the
// heap: it must stay at what FloodMax entries take.
func NearMemory(ctx context.Context, e *Env, r *report.Results) error {
	cfg := e.Cfg
	e.Progress.Step(fmt.Sprintf("near cache memory · %d entries, flood of %d keys", cfg.MemEntries, cfg.FloodKeys), 0)
	if !e.NearWorks(ctx) {
		r.NearMemory = &report.NearMemory{Skipped: "the server does not track keys for clients"}
		e.noteNoNear(&r.Notes)
		return nil
	}
	j := job{Kind: "near-memory", NS: e.key("near-memory"), Entries: cfg.MemEntries, FloodKeys: cfg.FloodKeys, FloodMax: cfg.FloodMax}
	res, _, err := e.Pods.Run(ctx, []job{j}, 5*time.Minute)
	if err != nil {
		return err
	}
	if res[0].Mem == nil {
		return fmt.Errorf("the pod measured nothing")
	}
	r.NearMemory = res[0].Mem
	return nil
}

// heap returns the live heap after a full collection.
func heap() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// runNearMemory is the pod's side of NearMemory.
func runNearMemory(rdb *redis.Client, j job, start time.Time) (*podResult, error) {
	ctx := context.Background()
	time.Sleep(time.Until(start))
	m := &report.NearMemory{ValueBytes: memValueBytes, Entries: j.Entries, FloodKeys: j.FloodKeys, FloodMax: j.FloodMax}

	// One entry as the cache stores it, copied to every key: the stored
	// form holds no key, and writing it with pipelined SETs is much
	// faster than a Set per key.
	plain, err := cache.New(rdb, &cache.Options{Namespace: j.NS, Expiry: cache.ExpiryPolicy{Fresh: time.Hour}})
	if err != nil {
		return nil, err
	}
	v := make([]byte, memValueBytes)
	_, _ = rand.Read(v)
	err = cache.Set(ctx, plain, "proto", v)
	_ = plain.Close()
	if err != nil {
		return nil, fmt.Errorf("store the value: %w", err)
	}
	stored, err := rdb.Get(ctx, valueKey(j.NS, "proto")).Bytes()
	if err != nil {
		return nil, fmt.Errorf("read the stored value back: %w", err)
	}
	memKeys, floodKeys := keyList("m", j.Entries), keyList("f", j.FloodKeys)
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = forBatches(dctx, rdb, append(memKeys, floodKeys...), func(p redis.Pipeliner, keys []string) {
			vk := make([]string, len(keys))
			for i, k := range keys {
				vk[i] = valueKey(j.NS, k)
			}
			p.Unlink(dctx, vk...)
		})
	}()
	for _, keys := range [][]string{memKeys, floodKeys} {
		if err := forBatches(ctx, rdb, keys, func(p redis.Pipeliner, keys []string) {
			for _, k := range keys {
				p.Set(ctx, valueKey(j.NS, k), stored, time.Hour)
			}
		}); err != nil {
			return nil, fmt.Errorf("store the keys: %w", err)
		}
	}

	// Heap per entry.
	base := heap()
	c, err := nearCache(rdb, j.NS, j.Entries+j.Entries/10)
	if err != nil {
		return nil, err
	}
	if _, err := readAll(ctx, c, memKeys); err != nil {
		_ = c.Close()
		return nil, err
	}
	m.HeapFilled = heap() - base
	if m.Present, err = readAll(ctx, c, memKeys); err != nil {
		_ = c.Close()
		return nil, err
	}
	m.HeapDecoded = heap() - base
	_ = c.Close()
	c = nil

	// The flood.
	base = heap()
	c, err = nearCache(rdb, j.NS, j.FloodMax)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var peak atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			if b := int64(s[0].Value.Uint64()); b > peak.Load() {
				peak.Store(b)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})
	t0 := time.Now()
	m.FloodNearHits, err = readAll(ctx, c, floodKeys)
	m.FloodSeconds = time.Since(t0).Seconds()
	close(stop)
	sampler.Wait()
	if err != nil {
		return nil, err
	}
	m.FloodPeak = peak.Load() - base
	m.FloodAfter = heap() - base
	// Which entries stayed: a sample of the last keys read (reading more
	// would fill and evict as it goes).
	m.FloodSample = min(len(floodKeys), j.FloodMax, 10_000)
	if m.FloodPresent, err = readAll(ctx, c, floodKeys[len(floodKeys)-m.FloodSample:]); err != nil {
		return nil, err
	}
	return &podResult{Requests: 2*len(memKeys) + len(floodKeys) + m.FloodSample, Mem: m}, nil
}

// valueKey is where a Cache of namespace ns stores key's value.
func valueKey(ns, key string) string { return ns + ":{" + redisx.Tag(key) + "}" }

func keyList(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	return keys
}

// nearCache returns a Cache of namespace ns with a near cache of max
// entries, once the near cache answers.
func nearCache(rdb *redis.Client, ns string, max int) (*cache.Cache, error) {
	c, err := cache.New(rdb, &cache.Options{Namespace: ns, Expiry: cache.ExpiryPolicy{Fresh: time.Hour}, Near: &cache.Near{MaxEntries: max}})
	if err != nil {
		return nil, err
	}
	if err := awaitNear(c, nearWait); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// forBatches sends fn's commands for keys in pipelines of 1000 keys, four
// pipelines at a time.
func forBatches(ctx context.Context, rdb *redis.Client, keys []string, fn func(p redis.Pipeliner, keys []string)) error {
	const batch = 1000
	var next atomic.Int64
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)-1) * batch
				if i >= len(keys) {
					return
				}
				p := rdb.Pipeline()
				fn(p, keys[i:min(i+batch, len(keys))])
				if _, err := p.Exec(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// readAll reads every key once with cache.Get from 32 goroutines and
// returns how many reads the near cache answered.
func readAll(ctx context.Context, c *cache.Cache, keys []string) (int64, error) {
	before := c.Stats().NearHits
	var next atomic.Int64
	var failed atomic.Pointer[error]
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for failed.Load() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(keys) {
					return
				}
				v, err := cache.Get[[]byte](ctx, c, keys[i])
				if err == nil && len(v) != memValueBytes {
					err = fmt.Errorf("read %d bytes, want %d", len(v), memValueBytes)
				}
				if err != nil {
					err = fmt.Errorf("read %s: %w", keys[i], err)
					failed.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if p := failed.Load(); p != nil {
		return 0, *p
	}
	return int64(c.Stats().NearHits - before), nil
}
