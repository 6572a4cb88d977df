package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/redis/go-redis/v9"
)

// A worker is this program started again with QUERY_WORKER set: one
// service instance. It talks to the parent over stdin and stdout:
//
//	worker → parent   "ready"            connected, database open
//	parent → worker   "go"               start all goroutines now
//	worker → parent   "report {json}"    a workerReport
const (
	envWorker     = "QUERY_WORKER"     // worker number; set only in workers
	envMode       = "QUERY_MODE"       // modeDirect or modeCached
	envDB         = "QUERY_DB"         // path of the SQLite file
	envGoroutines = "QUERY_GOROUTINES" // concurrent requests per worker
	envCounter    = "QUERY_COUNTER"    // Redis key counting query runs (INCR)
	envCacheKey   = "QUERY_CACHE_KEY"  // cache key of the answer
	// REDIS_URL names the server, as for the parent.

	modeDirect = "direct"
	modeCached = "cached"
)

// workerReport is what a worker tells the parent when it is done.
type workerReport struct {
	Worker   int
	Requests int
	Errors   int
	FirstErr string         `json:",omitempty"`
	Answers  map[string]int // digest of the answer → how many requests got it
	Slowest  time.Duration  // longest request
	Total    time.Duration  // sum of request times
	Stats    *cache.Stats   `json:",omitempty"` // nil without the cache
}

// worker runs one worker process.
func worker(id int) error {
	goroutines, err := strconv.Atoi(os.Getenv(envGoroutines))
	if err != nil || goroutines < 1 {
		return fmt.Errorf("bad %s %q", envGoroutines, os.Getenv(envGoroutines))
	}
	mode, counter, key := os.Getenv(envMode), os.Getenv(envCounter), os.Getenv(envCacheKey)
	opts, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		return err
	}
	opts.PoolSize = goroutines + 4 // every goroutine may hold a connection at the start
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	db, err := openShop(os.Getenv(envDB))
	if err != nil {
		return err
	}
	defer db.Close()

	// The requests have no deadline of their own: how long 64 concurrent
	// queries take depends on the machine (seconds on a busy one), and the
	// parent bounds the whole run, killing workers it stops waiting for.
	ctx := context.Background()
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		return fmt.Errorf("server: %w", err)
	}

	// query is the expensive work. Each run is counted on the server, so
	// that the runs of all workers add up in one place.
	query := func(ctx context.Context) ([]Segment, error) {
		if err := rdb.Incr(ctx, counter).Err(); err != nil {
			return nil, fmt.Errorf("count query run: %w", err)
		}
		return revenueBySegment(ctx, db)
	}

	var c *cache.Cache
	request := query
	switch mode {
	case modeDirect:
	case modeCached:
		c, err = cache.New(rdb, &cache.Options{Expiry: cache.ExpiryPolicy{Fresh: time.Minute}})
		if err != nil {
			return err
		}
		defer c.Close()
		request = func(ctx context.Context) ([]Segment, error) {
			return cache.GetOrLoad(ctx, c, key, query)
		}
	default:
		return fmt.Errorf("bad %s %q", envMode, mode)
	}

	fmt.Println("ready")
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil || line != "go\n" {
		return fmt.Errorf("waiting for go: got %q, %v", line, err)
	}

	rep := workerReport{Worker: id, Requests: goroutines, Answers: map[string]int{}}
	var (
		mu sync.Mutex // guards rep
		wg sync.WaitGroup
	)
	for range goroutines {
		wg.Go(func() {
			start := time.Now()
			segs, err := request(ctx)
			d := time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			rep.Total += d
			rep.Slowest = max(rep.Slowest, d)
			if err != nil {
				if rep.Errors == 0 {
					rep.FirstErr = err.Error()
				}
				rep.Errors++
				return
			}
			rep.Answers[digest(segs)]++
		})
	}
	wg.Wait()
	if c != nil {
		s := c.Stats()
		rep.Stats = &s
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	fmt.Println("report", string(b))
	return nil
}
