// This file holds a worker process: its state, the commands it answers on
// stdin (warm, run, stats, stop), and opening and closing its clients.

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/faultproxy"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

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

	requests, gets, loads, writes atomic.Int64
	lockRuns                      atomic.Int64
	lateWrites, lateReads         atomic.Int64
	staleReads, staleReadsLocal   atomic.Int64
	wrongValues                   atomic.Int64
	accepted                      []atomic.Int64 // per counter
	minVer                        []atomic.Int64 // per key: version at this process's latest completed Delete
	coh                           coherence
	stalls                        stalls       // how long this process was starved of CPU, when
	trackingLost, nearOff         atomic.Int64 // counted by logger
	logger                        *slog.Logger // the caches': counts what the near cache logs (logCounter)

	mu         sync.Mutex // guards the maps and slices below
	errs       map[string]int64
	faults     map[string]int64
	excluded   map[string]bool
	staleSets  map[string]bool // stale values the probe saw
	samples    []string
	violations []string // reads older than the coherence bound, described
	excused    int      // of violations, those while failing open
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
	w.logger = slog.New(logCounter{w})
	w.coh.nearHits, w.coh.lastNearHit = make([]atomic.Int64, cfg.Keys), make([]atomic.Int64, cfg.Keys)
	w.coh.history = make([]keyHistory, cfg.Keys)
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

func (w *worker) close() {
	w.web.close()
	_ = w.c.Close()
	_ = w.cacheC.Close()
	_ = w.lockC.Close()
	_ = w.cacheP.Close()
	_ = w.lockP.Close()
	_ = w.direct.Close()
}
