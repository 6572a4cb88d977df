package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/redis/go-redis/v9"
)

// A worker is this program started again with STAMPEDE_WORKER set: one
// service instance (one pod). It talks to the parent over stdin and stdout:
//
//	worker → parent   "ready"               connected, connections warm
//	parent → worker   "go UNIXNANO PHASE"   fire one burst at that instant
//	worker → parent   "report {json}"       a workerReport for the burst
//	parent → worker   end of input          stop
const (
	envWorker     = "STAMPEDE_WORKER"     // worker number; set only in workers
	envApproach   = "STAMPEDE_APPROACH"   // approachNaive or approachCache
	envGoroutines = "STAMPEDE_GOROUTINES" // concurrent requests per burst
	envLoad       = "STAMPEDE_LOAD"       // how long the loader takes
	envTTL        = "STAMPEDE_TTL"        // how long a loaded value is fresh
	envPrefix     = "STAMPEDE_PREFIX"     // prefix of this run's keys
	// REDIS_URL names the server, as for the parent.

	approachNaive = "naive"
	approachCache = "stampede"

	hotKey = "hot" // the one key every request asks for
)

// staleTTL is how long after its TTL the cache may serve a value while one
// process refreshes it: much longer than the demo, as in production.
const staleTTL = time.Minute

// Value is what the expensive loader produces. Version counts loads (1 for
// the first); Worker is the process that ran the load.
type Value struct {
	Version int64
	Worker  int
}

// runKeys are the server keys of one approach in one run. All of them carry
// the same hash tag, so the counting pipeline also works on a cluster.
type runKeys struct {
	naive     string // naive cache-aside: the cached value
	namespace string // stampede's cache namespace
	version   string // INCR per load: the value's version
	loads     string // hash: phase → loader calls
}

func keysFor(prefix, approach string) runKeys {
	tag := "{" + prefix + ":" + approach + "}"
	return runKeys{
		naive:     tag + ":value",
		namespace: prefix + ":" + approach + ":cache",
		version:   tag + ":version",
		loads:     tag + ":loads",
	}
}

// workerReport is what a worker tells the parent after each burst.
type workerReport struct {
	Worker    int
	Phase     string
	Latencies []time.Duration // one per request
	Fresh     int             // served a fresh value
	Stale     int             // served a stale value at once
	Waited    int             // found no usable value and waited for a load
	Served    int             // answered by a load (its own, or one it joined or waited for)
	Errors    int
	FirstErr  string        `json:",omitempty"`
	Versions  map[int64]int // value version → requests that got it
	LoadedBy  map[int64]int // value version → worker that loaded it
}

// worker runs one worker process.
func worker(id int) error {
	goroutines, err := strconv.Atoi(os.Getenv(envGoroutines))
	if err != nil || goroutines < 1 {
		return fmt.Errorf("bad %s %q", envGoroutines, os.Getenv(envGoroutines))
	}
	loadTime, err := time.ParseDuration(os.Getenv(envLoad))
	if err != nil {
		return fmt.Errorf("bad %s: %w", envLoad, err)
	}
	ttl, err := time.ParseDuration(os.Getenv(envTTL))
	if err != nil {
		return fmt.Errorf("bad %s: %w", envTTL, err)
	}
	approach := os.Getenv(envApproach)
	keys := keysFor(os.Getenv(envPrefix), approach)
	opts, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		return err
	}
	opts.PoolSize = goroutines + 8 // every request may hold a connection at once
	rdb := redis.NewClient(opts)
	defer rdb.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// phase is the burst being served; the loader counts its calls under it
	// (a background refresh started by a burst counts for that burst).
	var phase atomic.Pointer[string]
	none := "none"
	phase.Store(&none)

	// load is the expensive work: 200 ms of "database". Each call is counted
	// on the server, so that the calls of all workers add up in one place.
	load := func(ctx context.Context) (Value, error) {
		var version *redis.IntCmd
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			version = p.Incr(ctx, keys.version)
			p.HIncrBy(ctx, keys.loads, *phase.Load(), 1)
			return nil
		})
		if err != nil {
			return Value{}, fmt.Errorf("count load: %w", err)
		}
		t := time.NewTimer(loadTime)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return Value{}, ctx.Err()
		}
		return Value{Version: version.Val(), Worker: id}, nil
	}

	// request is one incoming request for the hot key; kind says how it was
	// served (naive only: the cache's kinds come from its Stats).
	var request func(ctx context.Context) (v Value, kind string, err error)
	var c *cache.Cache
	switch approach {
	case approachNaive:
		// What most code does: GET; on a miss, load and SET with a TTL.
		request = func(ctx context.Context) (Value, string, error) {
			b, err := rdb.Get(ctx, keys.naive).Bytes()
			if err == nil {
				var v Value
				err = json.Unmarshal(b, &v)
				return v, "fresh", err
			}
			if !errors.Is(err, redis.Nil) {
				return Value{}, "", err
			}
			v, err := load(ctx)
			if err != nil {
				return Value{}, "", err
			}
			b, _ = json.Marshal(v)
			return v, "waited", rdb.Set(ctx, keys.naive, b, ttl).Err()
		}
	case approachCache:
		c, err = cache.New(rdb, &cache.Options{Namespace: keys.namespace, Expiry: cache.ExpiryPolicy{Fresh: ttl, Stale: staleTTL}})
		if err != nil {
			return err
		}
		defer c.Close()
		request = func(ctx context.Context) (Value, string, error) {
			v, err := cache.GetOrLoad(ctx, c, hotKey, load)
			return v, "", err
		}
	default:
		return fmt.Errorf("bad %s %q", envApproach, approach)
	}

	// Open the connections now, so that the bursts measure the cache and
	// not the dialing.
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() { rdb.Ping(ctx) })
	}
	wg.Wait()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	fmt.Println("ready")

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var at int64
		var name string
		if f := strings.SplitN(in.Text(), " ", 3); len(f) == 3 && f[0] == "go" {
			at, err = strconv.ParseInt(f[1], 10, 64)
			name = f[2]
		}
		if name == "" || err != nil {
			return fmt.Errorf("unexpected input %q", in.Text())
		}
		phase.Store(&name)
		rep := workerReport{Worker: id, Phase: name, Versions: map[int64]int{}, LoadedBy: map[int64]int{}}
		var before cache.Stats
		if c != nil {
			before = c.Stats()
		}
		var mu sync.Mutex // guards rep
		start := make(chan struct{})
		for range goroutines {
			wg.Go(func() {
				<-start
				t := time.Now()
				v, kind, err := request(ctx)
				d := time.Since(t)
				mu.Lock()
				defer mu.Unlock()
				rep.Latencies = append(rep.Latencies, d)
				if err != nil {
					if rep.Errors == 0 {
						rep.FirstErr = err.Error()
					}
					rep.Errors++
					return
				}
				rep.Versions[v.Version]++
				rep.LoadedBy[v.Version] = v.Worker
				switch kind {
				case "fresh":
					rep.Fresh++
				case "waited":
					rep.Waited++
					rep.Served++ // naive: each ran its own load
				}
			})
		}
		time.Sleep(time.Until(time.Unix(0, at)))
		close(start)
		wg.Wait()
		if c != nil {
			// Stats count calls, and every call is counted before it
			// returns, so the difference is exactly this burst's.
			s := c.Stats()
			rep.Fresh = int(s.Hits - before.Hits)
			rep.Stale = int(s.StaleHits - before.StaleHits)
			rep.Waited = int(s.Misses - before.Misses)
			rep.Served = int(s.Served - before.Served)
		}
		b, err := json.Marshal(rep)
		if err != nil {
			return fmt.Errorf("encode report: %w", err)
		}
		fmt.Println("report", string(b))
	}
	return in.Err()
}
