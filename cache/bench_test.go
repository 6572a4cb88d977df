package cache_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/maypok86/otter/v2"
	"github.com/vmihailenco/msgpack/v5"
)

type profile struct {
	ID      int64
	Name    string
	Email   string
	Tags    []string
	Balance float64
}

var sample = profile{ID: 42, Name: "Ada Lovelace", Email: "ada@example.com", Tags: []string{"admin", "beta"}, Balance: 1234.5}

// BenchmarkHit compares a fresh hit through GetOrLoad with what it must
// at least do: a raw go-redis GET of the same key and a msgpack decode of
// the same bytes, measured in the same run, and the same hit through a
// Batcher's Get. Compare ns/op and allocs/op.
func BenchmarkHit(b *testing.B) {
	s := redistest.Shared(b, redistest.Redis8)
	ctx := context.Background()
	c, rc := newCache(b, s, nil)
	if err := cache.Set(ctx, c, "profile:42", sample, cache.WithExpiry(cache.Expiry{Fresh: time.Hour})); err != nil {
		b.Fatal(err)
	}
	rawKey := redistest.Key(b, "raw")
	enc, _ := msgpack.Marshal(sample)
	if err := rc.Set(ctx, rawKey, enc, time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
	load := func(context.Context) (profile, error) { panic("a hit must not load") }

	b.Run("raw-get-decode", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				raw, err := rc.Get(ctx, rawKey).Bytes()
				if err != nil {
					b.Fatal(err)
				}
				var p profile
				if err := msgpack.Unmarshal(raw, &p); err != nil || p.ID != 42 {
					b.Fatal(err)
				}
			}
		})
	})
	b.Run("stampede", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := cache.GetOrLoad(ctx, c, "profile:42", load)
				if err != nil || p.ID != 42 {
					b.Fatal(err)
				}
			}
		})
	})
	bt, err := cache.NewBatcher(c, func(context.Context, []string) (map[string]profile, error) { panic("a hit must not load") }, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("batcher", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, err := bt.Get(ctx, "profile:42")
				if err != nil || p.ID != 42 {
					b.Fatal(err)
				}
			}
		})
	})
}

// workerWake waits for keys named on its go list and reports, per key, the
// time from the rebuilder's loader returning (stored under "t:"+key) to
// this process having the value: with GetOrLoad (MODE=stampede) or with a
// loop that GETs the stored key every 50ms (MODE=poll).
func workerWake() int {
	c, rc := workerCache()
	defer rc.Close()
	defer c.Close()
	ctx := context.Background()
	fmt.Println("ready")
	for {
		kv, err := rc.BLPop(ctx, time.Minute, env("GO")).Result()
		if err != nil {
			return fail(err)
		}
		key := kv[1]
		if key == "stop" {
			return 0
		}
		if env("MODE") == "poll" {
			stored := env("NS") + ":{" + key + "}"
			for {
				if n, err := rc.Exists(ctx, stored).Result(); err != nil {
					return fail(err)
				} else if n == 1 {
					if _, err := cache.Get[string](ctx, c, key); err == nil {
						break
					}
				}
				time.Sleep(50 * time.Millisecond) // the baseline: a fixed poll loop
			}
		} else if _, err := cache.GetOrLoad(ctx, c, key, func(context.Context) (string, error) {
			return "", fmt.Errorf("waiter loaded %s", key)
		}); err != nil {
			return fail(err)
		}
		done := time.Now().UnixNano()
		wrote, err := rc.Get(ctx, "t:"+key).Int64()
		if err != nil {
			return fail(err)
		}
		if err := rc.RPush(ctx, env("RESULTS"), done-wrote).Err(); err != nil {
			return fail(err)
		}
	}
}

// BenchmarkWake measures, across processes, the time from the rebuilder's
// load finishing to a waiting process returning the value: GetOrLoad's
// announcement against a 50ms poll loop, in the same run. Each iteration
// is one cold key loaded by this process (20ms loader) while two worker
// processes wait for it.
func BenchmarkWake(b *testing.B) {
	s := redistest.Shared(b, redistest.Redis8)
	for _, mode := range []string{"stampede", "poll"} {
		b.Run(mode, func(b *testing.B) {
			const waiters = 2
			ctx := context.Background()
			ns := namespace(b)
			c, rc := newCache(b, s, &cache.Options{Namespace: ns})
			goList, results := redistest.Key(b, "go"), redistest.Key(b, "results")
			var ps []*redistest.Proc
			for range waiters {
				ps = append(ps, redistest.Spawn(b, s, "wake", "CACHETEST_NS="+ns, "CACHETEST_GO="+goList,
					"CACHETEST_RESULTS="+results, "CACHETEST_MODE="+mode,
					"CACHETEST_TTL=1m", "CACHETEST_STALE=0s", "CACHETEST_LOCKTTL=5s"))
			}
			for _, p := range ps {
				if line := <-p.Lines(); line != "ready" {
					b.Fatalf("worker said %q", line)
				}
			}
			var lat []time.Duration
			b.ResetTimer()
			for i := range b.N {
				key := "k" + strconv.Itoa(i)
				_, err := cache.GetOrLoad(ctx, c, key, func(ctx context.Context) (string, error) {
					if err := rc.RPush(ctx, goList, key, key).Err(); err != nil {
						return "", err
					}
					time.Sleep(20 * time.Millisecond) // the expensive load; the waiters arrive meanwhile
					return "v", rc.Set(ctx, "t:"+key, time.Now().UnixNano(), time.Minute).Err()
				})
				if err != nil {
					b.Fatal(err)
				}
				for range waiters {
					kv, err := rc.BLPop(ctx, 10*time.Second, results).Result()
					if err != nil {
						b.Fatal(err)
					}
					ns, _ := strconv.ParseInt(kv[1], 10, 64)
					lat = append(lat, time.Duration(ns))
				}
			}
			b.StopTimer()
			rc.RPush(ctx, goList, "stop", "stop")
			for _, p := range ps {
				if _, err := p.Wait(ctx); err != nil {
					b.Fatal(err)
				}
			}
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			q := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())
			}
			b.ReportMetric(q(0.5), "p50-µs")
			b.ReportMetric(q(0.99), "p99-µs")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkNearHit compares a fresh hit answered by the near cache with
// its in-process ceiling, measured in the same run: a Get of the decoded
// value from an otter cache (the library the near cache keeps its entries
// in), which nobody tells of a change on the server.
func BenchmarkNearHit(b *testing.B) {
	s := redistest.Shared(b, redistest.Redis8)
	ctx := context.Background()
	c, _ := newCache(b, s, &cache.Options{Near: &cache.Near{MaxEntries: 100_000}})
	if err := cache.Set(ctx, c, "profile:42", sample, cache.WithExpiry(cache.Expiry{Fresh: time.Hour})); err != nil {
		b.Fatal(err)
	}
	load := func(context.Context) (profile, error) { panic("a hit must not load") }
	redistest.WaitFor(b, ctx, "near cache active", c.NearActive)
	redistest.WaitFor(b, ctx, "a near hit", func() bool {
		_, err := cache.GetOrLoad(ctx, c, "profile:42", load)
		return err == nil && c.Stats().NearHits > 0
	})
	o, err := otter.New(&otter.Options[string, profile]{MaximumSize: 100_000})
	if err != nil {
		b.Fatal(err)
	}
	o.Set("profile:42", sample)

	b.Run("otter-get", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if p, ok := o.GetIfPresent("profile:42"); !ok || p.ID != 42 {
					b.Fatal("otter lost the entry")
				}
			}
		})
	})
	b.Run("near-hit", func(b *testing.B) {
		b.ReportAllocs()
		before := c.Stats().NearHits
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if p, err := cache.GetOrLoad(ctx, c, "profile:42", load); err != nil || p.ID != 42 {
					b.Fatal(err)
				}
			}
		})
		if got := c.Stats().NearHits - before; got < uint64(b.N) {
			b.Fatalf("%d of %d hits from the near cache", got, b.N)
		}
	})
}
