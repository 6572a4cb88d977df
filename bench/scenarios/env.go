package scenarios

import (
	"context"
	"strings"
	"time"

	"github.com/hotkv/stampede/bench/report"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// Config is what the flags asked for, with defaults applied.
type Config struct {
	Procs      int           // processes (pods) in the cache scenarios
	Goroutines int           // goroutines per process in the cold stampede
	Load       time.Duration // how long the loader takes
	Rate       float64       // hot key: requests per second, all processes together
	Duration   time.Duration // hot key: how long each approach runs
	TTL        time.Duration // hot key: how long a value is fresh
	Quick      bool

	HitDuration  time.Duration // hit path: per mode
	LockDuration time.Duration // lock: per strategy; lock gap: per run

	GapShapes      []GapShape // cold gap: processes × goroutines
	Reps           int        // gap scenarios: runs per approach
	LockGoroutines int        // lock gap: goroutines per process
	LargeIters     int        // large values: iterations for 1 KiB (fewer for larger)

	ScaleProcs []int         // scaling: process counts
	ScaleKeys  []int         // scaling: distinct key counts
	ScaleLoad  time.Duration // scaling by keys: loader time, short to keep 10 000 keys bounded

	CoherenceCycles int // coherence: write cycles (3 measured writes each)
	MemEntries      int // near memory: entries whose heap is measured
	FloodKeys       int // near memory: distinct keys of the flood
	FloodMax        int // near memory: the flooded near cache's MaxEntries

	PageRate   float64       // page purge: requests per second, all processes together
	PagePhase  time.Duration // page purge: how long each phase lasts
	PageRender time.Duration // page purge: how long the page takes to render

	BatchKeys   int           // batched refreshes: keys falling due
	BatchSpread time.Duration // batched refreshes: within how long they fall due
	BatchLead   time.Duration // batched refreshes: from storing them to the first falling due (the hit phase)
	BatchRate   float64       // batched refreshes: requests per second, all processes together
	BatchLoad   time.Duration // batched refreshes: how long one loader call takes
	BatchWindow time.Duration // batched refreshes: the Batcher's Window
	BatchMax    int           // batched refreshes: the Batcher's MaxKeys
}

// Env is what scenarios run with. It is used by one goroutine at a time.
type Env struct {
	Cfg      Config
	RDB      *redis.Client // the orchestrator's own client
	Pods     *Pods
	Progress *report.Progress
	RunID    string
	Caps     lock.Capabilities // what the server was found to offer
	Embedded bool              // the server is the embedded miniredis

	nearChecked, nearOK bool // NearWorks's answer, once found
}

// key returns a key (or prefix) private to this run.
func (e *Env) key(parts ...string) string {
	return "bench:" + e.RunID + ":" + strings.Join(parts, ":")
}

// Cleanup deletes every key of this run that is still there.
func (e *Env) Cleanup(ctx context.Context) error {
	iter := e.RDB.Scan(ctx, 0, e.key("*"), 1000).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := e.RDB.Del(ctx, batch...).Err()
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return flush()
}

// Scenario is one thing the bench measures.
type Scenario struct {
	Name  string // as given to -scenarios
	Title string
	// Steps is how many progress steps Run will take.
	Steps func(Config) int
	Run   func(ctx context.Context, e *Env, r *report.Results) error
}

// All returns every scenario, in the order the bench runs them.
func All() []Scenario {
	n := len(Approaches())
	return []Scenario{
		{Name: "cold", Title: "cold stampede", Steps: func(Config) int { return n + 1 }, Run: Cold},
		{Name: "hot", Title: "hot-key expiry", Steps: func(Config) int { return n + 1 }, Run: Hot},
		{Name: "hit", Title: "hit path", Steps: func(Config) int { return len(hitModes()) }, Run: Hit},
		{Name: "lock", Title: "lock", Steps: func(Config) int { return len(releaseStrategies()) }, Run: Lock},
		{Name: "cold-gap", Title: "cold gap", Run: ColdGap,
			Steps: func(c Config) int { return len(c.GapShapes) * c.Reps * len(gapApproaches()) }},
		{Name: "lock-gap", Title: "lock gap", Steps: func(c Config) int { return 2 * c.Reps }, Run: LockGap},
		{Name: "large", Title: "large values", Steps: func(Config) int { return len(largeSizes()) }, Run: Large},
		{Name: "scaling", Title: "scaling", Run: Scaling,
			Steps: func(c Config) int { return n * (len(c.ScaleProcs) + len(c.ScaleKeys)) }},
		{Name: "near-hit", Title: "near cache hit path", Steps: func(Config) int { return len(nearHitModes()) }, Run: NearHitPath},
		{Name: "coherence", Title: "near cache coherence", Steps: func(Config) int { return 2 }, Run: Coherence},
		{Name: "near-memory", Title: "near cache memory", Steps: func(Config) int { return 1 }, Run: NearMemory},
		{Name: "purge", Title: "page purge", Steps: func(Config) int { return len(pagePlans()) }, Run: PagePurge},
		{Name: "backend-cap", Title: "backend cap", Steps: func(Config) int { return 2 }, Run: BackendCap},
		{Name: "batch-refresh", Title: "batched refreshes", Steps: func(Config) int { return len(batchApproaches()) }, Run: BatchRefresh},
	}
}

// Names returns the names of all scenarios.
func Names() []string {
	var out []string
	for _, s := range All() {
		out = append(out, s.Name)
	}
	return out
}
