package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/faultproxy"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// envWorker names the worker in a worker process; envConfig carries its
// configuration as JSON.
const (
	envWorker = "STAMPEDE_SOAK_WORKER"
	envConfig = "STAMPEDE_SOAK_CONFIG"
)

// isWorker reports whether this process is a worker started by the soak.
func isWorker() bool { return os.Getenv(envWorker) != "" }

// workerConfig is what the coordinator tells each worker.
type workerConfig struct {
	Index    int           `json:"index"`
	URL      string        `json:"url"`
	Prefix   string        `json:"prefix"` // every key of the run starts with it
	Keys     int           `json:"keys"`
	Counters int           `json:"counters"`
	Seed     uint64        `json:"seed"`
	Readers  int           `json:"readers"`
	Writers  int           `json:"writers"`
	Lockers  int           `json:"lockers"`
	HTTP     int           `json:"http"` // HTTP client goroutines
	Warmup   time.Duration `json:"warmup"`
	Sabotage bool          `json:"sabotage"` // break the invariants on purpose, to test the checks
}

// Key names shared by the coordinator and the workers.
func dbKey(prefix string, k int) string   { return prefix + ":db:" + strconv.Itoa(k) }
func delKey(prefix string, k int) string  { return prefix + ":del:" + strconv.Itoa(k) }
func ctrKey(prefix string, n int) string  { return prefix + ":ctr:" + strconv.Itoa(n) }
func lockKey(prefix string, n int) string { return prefix + ":lock:" + strconv.Itoa(n) }
func cacheKey(k int) string               { return "k" + strconv.Itoa(k) }
func namespace(prefix string) string      { return prefix + ":cache" }

// value is what the loader returns: the key, the version it read and the
// worker that loaded it.
func value(key string, version int64, by string) string {
	return key + "@" + strconv.FormatInt(version, 10) + "@" + by
}

// parseValue splits a value "key@version@worker".
func parseValue(v string) (key string, version int64, by string, ok bool) {
	key, rest, ok1 := strings.Cut(v, "@")
	ver, by, ok2 := strings.Cut(rest, "@")
	n, err := strconv.ParseInt(ver, 10, 64)
	return key, n, by, ok1 && ok2 && err == nil
}

// worker is one worker process's state.
type worker struct {
	cfg    workerConfig
	direct *redis.Client // the database; never faulted
	cacheP *faultproxy.Proxy
	lockP  *faultproxy.Proxy
	cacheC *redis.Client // through cacheP
	lockC  *redis.Client // through lockP
	c      *cache.Cache  // through cacheP; open from open to close
	locks  *lock.Client
	web    *web // HTTP through the middleware, over its own Cache through cacheP

	requests, loads, writes, lockRuns atomic.Int64
	lateWrites, lateReads             atomic.Int64
	staleReads, staleReadsLocal       atomic.Int64
	wrongValues                       atomic.Int64
	accepted                          []atomic.Int64 // per counter
	minVer                            []atomic.Int64 // per key: version at this process's latest completed Delete

	mu        sync.Mutex // guards the maps and slices below
	errs      map[string]int64
	faults    map[string]int64
	excluded  map[string]bool
	staleSets map[string]bool // stale values the probe saw
	samples   []string
}

// workerMain is a worker process: it reads commands on stdin and answers
// each on stdout with one line.
func workerMain() int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(os.Getenv(envConfig)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "soak worker: config:", err)
		return 2
	}
	if err := runWorker(cfg, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "soak worker %d: %v\n", cfg.Index, err)
		return 1
	}
	return 0
}

func runWorker(cfg workerConfig, stdin *os.File, stdout *os.File) error {
	w := &worker{cfg: cfg, errs: map[string]int64{}, faults: map[string]int64{}, excluded: map[string]bool{}, staleSets: map[string]bool{},
		accepted: make([]atomic.Int64, cfg.Counters), minVer: make([]atomic.Int64, cfg.Keys)}
	reply := func(kind string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s %s\n", kind, b)
		return err
	}
	cmds := make(chan string)
	go func() {
		defer close(cmds)
		sc := bufio.NewScanner(stdin)
		for sc.Scan() {
			cmds <- sc.Text()
		}
	}()
	before := takeSnapshot()
	if err := w.open(); err != nil {
		return err
	}
	if err := reply("ready", struct{}{}); err != nil {
		return err
	}

	var (
		stopTraffic context.CancelFunc
		trafficDone chan struct{}
		start       snapshot
		startStacks string
	)
	stop := func() {
		if stopTraffic != nil {
			stopTraffic()
			<-trafficDone
			stopTraffic = nil
		}
	}
	defer stop()
	for cmd := range cmds {
		switch cmd {
		case "warm":
			// Warm-up: the same traffic and faults, for a while, so that
			// pools, script caches and lazily built state exist before the
			// start snapshot.
			ctx, cancel := context.WithTimeout(context.Background(), cfg.Warmup)
			w.traffic(ctx, 0)
			cancel()
			start, startStacks = w.quiesce()
			if err := reply("warmed", start); err != nil {
				return err
			}
		case "run":
			ctx, cancel := context.WithCancel(context.Background())
			stopTraffic, trafficDone = cancel, make(chan struct{})
			go func() { defer close(trafficDone); w.traffic(ctx, 1) }()
		case "stats":
			if err := reply("stats", w.report()); err != nil {
				return err
			}
		case "stop":
			stop()
			end, endStacks := w.quiesce()
			w.close()
			r := w.report()
			r.Before, r.Start, r.End, r.Closed = before, start, end, takeSnapshot()
			if end.Goroutines > start.Goroutines {
				r.StartStacks, r.EndStacks = startStacks, endStacks
			}
			if err := reply("done", r); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown command %q", cmd)
		}
	}
	return nil
}

func (w *worker) name() string { return "w" + strconv.Itoa(w.cfg.Index) }

// open starts the proxies and clients (see openFaulty).
func (w *worker) open() error {
	opts, err := redis.ParseURL(w.cfg.URL)
	if err != nil {
		return fmt.Errorf("url: %w", err)
	}
	direct := *opts
	direct.PoolSize = 64
	w.direct = redis.NewClient(&direct)
	if err := w.openFaulty(opts); err != nil {
		return err
	}
	w.cacheC.AddHook(probe{w})
	if w.locks, err = lock.New(w.lockC, nil); err != nil {
		return err
	}
	if w.c, err = w.newCache(); err != nil {
		return err
	}
	if w.web, err = w.openWeb(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return w.direct.Ping(ctx).Err()
}

// newCache returns the Cache the traffic uses: short TTLs and waits, so a
// few minutes see many expiries, stale refreshes, waits and takeovers.
func (w *worker) newCache() (*cache.Cache, error) {
	return cache.New(w.cacheC, &cache.Options{
		Namespace:        namespace(w.cfg.Prefix),
		TTL:              time.Second,
		StaleTTL:         500 * time.Millisecond,
		LockTTL:          time.Second,
		LoadTimeout:      2 * time.Second,
		WaitTimeout:      time.Second,
		PollInterval:     100 * time.Millisecond,
		RefreshBackoff:   200 * time.Millisecond,
		FailOpenCooldown: 250 * time.Millisecond,
		TTLJitter:        0.2,
	})
}

func (w *worker) close() {
	w.web.close()
	_ = w.c.Close()
	_ = w.cacheC.Close()
	_ = w.lockC.Close()
	_ = w.cacheP.Close()
	_ = w.lockP.Close()
	_ = w.direct.Close()
}
