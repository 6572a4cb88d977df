// This file holds the worker's configuration and what the coordinator and
// the workers agree on: how the configuration reaches a worker process, the
// key names, the format of a cached value, and the tuning of the Cache.

package main

import (
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hotkv/stampede/cache"
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
