// This file holds the soak's configuration: the flags of a run (options),
// what the coordinator tells each worker (workerConfig) and how it reaches
// a worker process, the key names and the value format both sides use, and
// the tuning of the Cache.

package main

import (
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hotkv/stampede/cache"
)

// options are the parsed flags.
type options struct {
	duration, warmup, progress time.Duration
	workers, keys, counters    int
	readers, writers, lockers  int
	http                       int // HTTP client goroutines per worker
	nearWorkers, nearEntries   int // workers with the near cache (the first ones), and its MaxEntries
	nearLease, nearMargin      time.Duration
	seed                       uint64
	url, json                  string
	sabotage                   bool // tests only: break the invariants on purpose
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.DurationVar(&o.duration, "duration", 3*time.Minute, "how long the traffic runs, after the warm-up")
	fs.DurationVar(&o.warmup, "warmup", 0, "warm-up before the start snapshot (default: a tenth of -duration, 2s to 15s)")
	fs.DurationVar(&o.progress, "progress", 10*time.Second, "how often to print a progress line")
	fs.IntVar(&o.workers, "workers", 4, "worker processes")
	fs.IntVar(&o.keys, "keys", 200, "distinct cache keys (Zipf distributed)")
	fs.IntVar(&o.counters, "counters", 3, "fenced counters behind locks")
	fs.IntVar(&o.readers, "readers", 8, "GetOrLoad goroutines per worker")
	fs.IntVar(&o.writers, "writers", 2, "update-then-Delete goroutines per worker")
	fs.IntVar(&o.lockers, "lockers", 2, "lock goroutines per worker")
	fs.IntVar(&o.http, "http", 2, "HTTP client goroutines per worker, requesting pages through the middleware")
	fs.IntVar(&o.nearWorkers, "near-workers", -1, "workers whose caches have the near cache (cache.Options.Near), the first ones (default: half, rounded up)")
	fs.IntVar(&o.nearEntries, "near-entries", 64, "the near cache's MaxEntries: below -keys, so that it evicts")
	fs.DurationVar(&o.nearLease, "near-lease", 250*time.Millisecond, "the near cache's Lease: short, so that black holes make it lapse")
	fs.DurationVar(&o.nearMargin, "near-margin", 50*time.Millisecond, "the coherence bound is -near-lease plus this (scheduling slack)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the traffic and fault schedules (default: random, printed)")
	fs.StringVar(&o.url, "redis", os.Getenv("REDIS_URL"), "server URL (redis://host:port); empty: an embedded miniredis. Default: $REDIS_URL")
	fs.StringVar(&o.json, "json", "", "also write the summary as JSON to this file")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./robustness/soak [flags]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.nearWorkers < 0 {
		o.nearWorkers = (o.workers + 1) / 2
	}
	if o.warmup == 0 {
		o.warmup = min(max(o.duration/10, 2*time.Second), 15*time.Second)
	}
	if o.seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		for _, x := range b {
			o.seed = o.seed<<8 | uint64(x)
		}
		o.seed = max(o.seed>>1, 1)
	}
	switch {
	case o.duration < time.Second:
		return o, fmt.Errorf("-duration %v: want at least 1s", o.duration)
	case o.warmup < 100*time.Millisecond:
		return o, fmt.Errorf("-warmup %v: want at least 100ms", o.warmup)
	case o.progress <= 0:
		return o, fmt.Errorf("-progress %v: want a positive duration", o.progress)
	case o.workers < 1 || o.workers > 32:
		return o, fmt.Errorf("-workers %d: want 1 to 32", o.workers)
	case o.keys < 2 || o.keys > 100000:
		return o, fmt.Errorf("-keys %d: want 2 to 100000", o.keys)
	case o.counters < 1 || o.counters > 100:
		return o, fmt.Errorf("-counters %d: want 1 to 100", o.counters)
	case o.readers < 0 || o.writers < 0 || o.lockers < 0 || o.readers+o.writers+o.lockers == 0 ||
		o.readers > 1000 || o.writers > 1000 || o.lockers > 1000:
		return o, errors.New("-readers, -writers, -lockers: want 0 to 1000 each, not all 0")
	case o.http < 0 || o.http > 1000:
		return o, fmt.Errorf("-http %d: want 0 to 1000", o.http)
	case o.nearWorkers > o.workers:
		return o, fmt.Errorf("-near-workers %d: want at most -workers (%d)", o.nearWorkers, o.workers)
	case o.nearEntries < 1:
		return o, fmt.Errorf("-near-entries %d: want at least 1", o.nearEntries)
	case o.nearLease < 10*time.Millisecond:
		return o, fmt.Errorf("-near-lease %v: want at least 10ms", o.nearLease)
	case o.nearMargin < 0:
		return o, fmt.Errorf("-near-margin %v: want 0 or more", o.nearMargin)
	}
	return o, nil
}

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

	// The near cache: on in this worker's caches (the value Cache and the
	// middleware's) if Near; Bound is the coherence bound the reads are
	// checked against, in every worker (see coherence.go).
	Near        bool          `json:"near"`
	NearEntries int           `json:"near_entries"`
	NearLease   time.Duration `json:"near_lease"`
	Bound       time.Duration `json:"bound"`
}

// Key names shared by the coordinator and the workers.
func dbKey(prefix string, k int) string   { return prefix + ":db:" + strconv.Itoa(k) }
func delKey(prefix string, k int) string  { return prefix + ":del:" + strconv.Itoa(k) }
func histKey(prefix string, k int) string { return prefix + ":hist:" + strconv.Itoa(k) }
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

// failOpenCooldown is the Caches' FailOpenCooldown.
const failOpenCooldown = 250 * time.Millisecond

// newCache returns the Cache the traffic uses: short TTLs and waits, so a
// few minutes see many expiries, stale refreshes, waits and takeovers.
// In a near worker it has the near cache too (see near).
func (w *worker) newCache() (*cache.Cache, error) {
	return cache.New(w.cacheC, &cache.Options{
		Near:      w.near(),
		Logger:    w.logger,
		Observer:  w.coh.observe,
		Namespace: namespace(w.cfg.Prefix),
		Expiry: cache.ExpiryPolicy{
			Fresh:          time.Second,
			Stale:          500 * time.Millisecond,
			RefreshBackoff: 200 * time.Millisecond,
			Jitter:         0.2,
		},
		LockTTL:          time.Second,
		LoadTimeout:      2 * time.Second,
		WaitTimeout:      time.Second,
		PollInterval:     100 * time.Millisecond,
		FailOpenCooldown: failOpenCooldown,
	})
}

// near is the near cache of a near worker's caches, nil elsewhere: fewer
// entries than keys (and pages), so that it evicts, and a short lease, so
// that the fault schedule's black holes make it lapse.
func (w *worker) near() *cache.Near {
	if !w.cfg.Near {
		return nil
	}
	return &cache.Near{MaxEntries: w.cfg.NearEntries, Lease: w.cfg.NearLease}
}
