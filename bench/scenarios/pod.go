package scenarios

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

	"github.com/maypok86/otter/v2"
	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/hotkv/stampede/bench/report"
)

// job is one pod's part of a scenario run.
type job struct {
	Kind     string // "cold", "hot", "hit", "coh-writer", "coh-reader", "near-memory", "page", "backend" or "batch"
	Approach string // an approach, or for "hit" a hit mode
	NS       string // key prefix (stampede's Namespace)
	Pod      int

	// cold: Goroutines work through Keys keys, each asked for PerKey
	// times in a row, in the same order in every pod.
	Keys, PerKey, Goroutines int
	Counter                  string // INCR'd by the loader

	// hot: Rate requests per second from PhaseShift after the start for
	// Duration; the loader appends its start to List. Warm: load the key
	// before saying ready.
	Rate       float64
	PhaseShift time.Duration
	Duration   time.Duration
	List       string
	Warm       bool

	// hit: Goroutines read Key in a closed loop for Duration.
	Key string

	Load, TTL, Stale time.Duration

	// hit with Throughput: count requests, time one in 256.
	Throughput bool

	// cold with Trace: report when loads ran and requests returned.
	Trace bool

	// coherence ("coh-writer", "coh-reader"): Cycles write cycles on Key;
	// the reader acknowledges each change it saw on List, and sleeps Pace
	// between reads (0: none).
	Cycles int
	Pace   time.Duration

	// near memory: Entries entries measured, then a flood of FloodKeys
	// keys through a near cache of FloodMax entries.
	Entries, FloodKeys, FloodMax int

	// page: Rate requests per second from PhaseShift after the start for
	// Duration, of one page that takes Load to render; pod 0 makes
	// Purges[k] at (k+1) × Phase after the start. Near: the cache has a
	// near cache.
	Purges []string
	Phase  time.Duration
	Near   bool

	// backend: the loads are capped at Cap fleet-wide (0: no cap).
	Cap int

	// batch: pod 0 stores Keys keys falling due within Spread from Lead
	// after; every pod of Procs reads them at Rate requests per second
	// (through a Batcher of Window and MaxKeys, or GetOrLoad), the loader
	// logging its calls on List and counting keys in the hash Counter.
	Spread, Lead, Window time.Duration
	MaxKeys, Procs       int
}

// podResult is what a pod reports for a job. Times are in microseconds.
type podResult struct {
	Requests int
	Errors   int
	FirstErr string  `json:",omitempty"`
	Lat      []int64 // per request
	At       []int64 `json:",omitempty"` // hot: start of each request since the run's start
	NearHits int64   `json:",omitempty"` // requests answered from the near cache
	Elapsed  int64   `json:",omitempty"` // throughput runs: how long the run took, ns

	Writes []cohWrite         `json:",omitempty"` // coherence: the writer's writes
	Marks  []cohMark          `json:",omitempty"` // coherence: what the reader saw change
	Mem    *report.NearMemory `json:",omitempty"` // near memory

	// cold with Trace, in µs since the run's start: each load's start and
	// end, and when each request returned.
	Loads [][2]int64 `json:",omitempty"`
	Ends  []int64    `json:",omitempty"`

	// page: how each request was answered (see report.PagePurge.Served),
	// the renders that began after the start, and, from pod 0, when each
	// purge call began and returned (µs since the start).
	Served  []string     `json:",omitempty"`
	Renders []pageRender `json:",omitempty"`
	Purges  [][2]int64   `json:",omitempty"`

	// backend: the most loads seen running at once, fleet-wide, and the
	// loads that waited for a permit (cache.Stats.BackendWaits).
	MaxConc      int64  `json:",omitempty"`
	BackendWaits uint64 `json:",omitempty"`

	// batch, from pod 0: when the first key falls due (Unix µs).
	Due int64 `json:",omitempty"`
}

// record adds one request to r.
func (r *podResult) record(at time.Duration, lat time.Duration, err error, withAt bool) {
	r.count(err)
	r.Lat = append(r.Lat, lat.Microseconds())
	if withAt {
		r.At = append(r.At, at.Microseconds())
	}
}

// count adds one request to r without its latency.
func (r *podResult) count(err error) {
	r.Requests++
	if err != nil {
		r.Errors++
		if r.FirstErr == "" {
			r.FirstErr = err.Error()
		}
	}
}

// merge adds the requests of o, one goroutine's share, to r.
func (r *podResult) merge(o *podResult) {
	r.Requests += o.Requests
	r.Errors += o.Errors
	if r.FirstErr == "" {
		r.FirstErr = o.FirstErr
	}
	r.Lat = append(r.Lat, o.Lat...)
}

// PodMain runs this process as a pod: it takes jobs from stdin until stdin
// closes and returns the exit code.
func PodMain() int {
	opts, err := redis.ParseURL(os.Getenv(envURL))
	if err != nil {
		fmt.Fprintln(os.Stderr, "pod:", err)
		return 2
	}
	if n, err := strconv.Atoi(os.Getenv(envPool)); err == nil && n > 0 {
		opts.PoolSize = n
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	fillPool(rdb, opts.PoolSize)
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		_ = out.Flush()
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 16<<20)
	for in.Scan() {
		var j job
		if err := json.Unmarshal(in.Bytes(), &j); err != nil {
			say("error bad job: %v", err)
			continue
		}
		res, err := runJob(rdb, j, in, say)
		if err != nil {
			say("error %s", strings.ReplaceAll(err.Error(), "\n", " "))
			continue
		}
		b, err := json.Marshal(res)
		if err != nil {
			say("error %v", err)
			continue
		}
		say("result %s", b)
	}
	return 0
}

// fillPool opens up to n connections at once, so that the first burst of
// a run does not pay for dialing.
func fillPool(rdb *redis.Client, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for range min(n, 64) {
		wg.Go(func() { _ = rdb.Ping(ctx).Err() })
	}
	wg.Wait()
}

// runJob prepares j, says ready, waits for go and runs it.
func runJob(rdb *redis.Client, j job, in *bufio.Scanner, say func(string, ...any)) (*podResult, error) {
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	switch j.Kind {
	case "coh-writer", "coh-reader", "near-memory":
		return runNearJob(rdb, j, in, say)
	case "lock-cycles":
		return runLockJob(rdb, j, in, say)
	case "page":
		return runPageJob(rdb, j, in, say)
	case "backend":
		return runBackendJob(rdb, j, in, say)
	case "batch":
		return runBatchJob(rdb, j, in, say)
	}
	var g getter
	var err error
	switch j.Kind {
	case "cold", "hot":
		g, err = newGetter(j.Approach, rdb, approachOptions{ns: j.NS, ttl: j.TTL, stale: j.Stale})
		if err != nil {
			return nil, err
		}
		defer g.close()
	case "hit":
		g, err = newHitGetter(j.Approach, rdb, j.NS)
		if err != nil {
			return nil, err
		}
		defer g.close()
	default:
		return nil, fmt.Errorf("unknown job kind %q", j.Kind)
	}
	if j.Kind != "hit" {
		// A fresh approach pays first-use costs (stampede probes the
		// server and loads its scripts; lock-poll loads its script): pay
		// them on a key of this pod's own, so that the run measures what
		// a process that has been up a while does.
		warm := func(context.Context) (Item, error) { return newItem("warm-up"), nil }
		if _, err := g.get(ctx, "warm-up-"+strconv.Itoa(j.Pod), warm); err != nil {
			return nil, fmt.Errorf("warm up: %w", err)
		}
	}
	if j.Warm {
		if _, err := g.get(ctx, j.Key, hotLoader(rdb, j)); err != nil {
			return nil, fmt.Errorf("warm up: %w", err)
		}
	}
	near0 := nearHits(g)
	start, err := awaitGo(in, say)
	if err != nil {
		return nil, err
	}
	var res *podResult
	switch j.Kind {
	case "cold":
		res = runCold(rdb, j, g, start)
	case "hot":
		res = runHot(rdb, j, g, start)
	case "hit":
		if j.Throughput {
			res = runThroughput(j, g, start)
		} else {
			res = runHit(j, g, start)
		}
	}
	res.NearHits = nearHits(g) - near0
	return res, nil
}

// nearHits returns the near-cache hits g counted so far: 0 for getters
// without a near cache.
func nearHits(g getter) int64 {
	if n, ok := g.(interface{ nearHits() int64 }); ok {
		return n.nearHits()
	}
	return 0
}

// awaitGo says ready and waits for the parent's go; it returns the
// instant to start at.
func awaitGo(in *bufio.Scanner, say func(string, ...any)) (time.Time, error) {
	say("ready")
	if !in.Scan() {
		return time.Time{}, errors.New("no go")
	}
	ns, ok := strings.CutPrefix(in.Text(), "go ")
	startNs, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil {
		return time.Time{}, fmt.Errorf("want go <ns>, got %q", in.Text())
	}
	return time.Unix(0, startNs), nil
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// runCold: Goroutines work through the request list as fast as they can.
func runCold(rdb *redis.Client, j job, g getter, start time.Time) *podResult {
	keys := make([]string, 0, j.Keys*j.PerKey)
	for k := range j.Keys {
		for range j.PerKey {
			keys = append(keys, "k"+strconv.Itoa(k))
		}
	}
	var mu sync.Mutex // guards loads
	var loads [][2]int64
	load := func(ctx context.Context) (Item, error) {
		began := time.Since(start)
		if err := rdb.Incr(ctx, j.Counter).Err(); err != nil {
			return Item{}, err
		}
		if err := sleep(ctx, j.Load); err != nil { // the expensive work
			return Item{}, err
		}
		if j.Trace {
			mu.Lock()
			loads = append(loads, [2]int64{began.Microseconds(), time.Since(start).Microseconds()})
			mu.Unlock()
		}
		return newItem(j.Counter), nil
	}
	lat := make([]time.Duration, len(keys))
	ends := make([]time.Duration, len(keys))
	errs := make([]error, len(keys))
	var next atomic.Int64
	time.Sleep(time.Until(start))
	var wg sync.WaitGroup
	for range j.Goroutines {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(keys) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				t0 := time.Now()
				_, errs[i] = g.get(ctx, keys[i], load)
				lat[i] = time.Since(t0)
				ends[i] = time.Since(start)
				cancel()
			}
		})
	}
	wg.Wait()
	res := &podResult{}
	for i := range keys {
		res.record(0, lat[i], errs[i], false)
		if j.Trace {
			res.Ends = append(res.Ends, ends[i].Microseconds())
		}
	}
	mu.Lock()
	res.Loads = loads
	mu.Unlock()
	return res
}

// hotLoader logs its start in j.List and takes j.Load.
func hotLoader(rdb *redis.Client, j job) func(context.Context) (Item, error) {
	return func(ctx context.Context) (Item, error) {
		if err := rdb.RPush(ctx, j.List, time.Now().UnixNano()).Err(); err != nil {
			return Item{}, err
		}
		if err := sleep(ctx, j.Load); err != nil {
			return Item{}, err
		}
		return newItem(j.Key), nil
	}
}

// runHot sends requests at a steady rate (open loop: a slow request does
// not delay the next) and times each from its scheduled tick.
func runHot(rdb *redis.Client, j job, g getter, start time.Time) *podResult {
	load := hotLoader(rdb, j)
	interval := time.Duration(float64(time.Second) / j.Rate)
	end := start.Add(j.Duration)
	time.Sleep(time.Until(start.Add(j.PhaseShift)))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var (
		mu  sync.Mutex // guards res
		res = &podResult{}
		wg  sync.WaitGroup
	)
	for now := time.Now(); now.Before(end); now = <-tick.C {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := g.get(ctx, j.Key, load)
			lat := time.Since(now)
			mu.Lock()
			res.record(now.Sub(start), lat, err, true)
			mu.Unlock()
		})
	}
	wg.Wait()
	return res
}

// newHitGetter returns a getter for one hit mode: "stampede" reads through
// GetOrLoad; "raw" is the floor, one GET and a msgpack decode.
func newHitGetter(mode string, rdb *redis.Client, ns string) (getter, error) {
	switch mode {
	case "raw":
		return rawGetter{rdb: rdb, key: ns + ":raw"}, nil
	case "stampede", nearApproach:
		return newGetter(mode, rdb, approachOptions{ns: ns, ttl: time.Hour})
	case "otter":
		return newOtterGetter(rdb, ns+":raw")
	}
	return nil, fmt.Errorf("unknown hit mode %q", mode)
}

// otterGetter is the in-process ceiling: the decoded item in an otter
// cache (the library under the near cache), read with Get; it is never
// told of a change on the server.
type otterGetter struct{ c *otter.Cache[string, Item] }

func newOtterGetter(rdb *redis.Client, key string) (getter, error) {
	it, err := rawGetter{rdb: rdb, key: key}.get(context.Background(), "", nil)
	if err != nil {
		return nil, err
	}
	c, err := otter.New(&otter.Options[string, Item]{MaximumSize: 100_000})
	if err != nil {
		return nil, err
	}
	c.Set("item", it)
	return otterGetter{c: c}, nil
}

func (o otterGetter) get(_ context.Context, key string, _ func(context.Context) (Item, error)) (Item, error) {
	it, ok := o.c.GetIfPresent(key)
	if !ok {
		return it, errHitLoaded
	}
	return it, nil
}

func (otterGetter) close() {}

type rawGetter struct {
	rdb *redis.Client
	key string
}

func (r rawGetter) get(ctx context.Context, _ string, _ func(context.Context) (Item, error)) (Item, error) {
	var it Item
	b, err := r.rdb.Get(ctx, r.key).Bytes()
	if err != nil {
		return it, err
	}
	err = msgpack.Unmarshal(b, &it)
	return it, err
}

func (rawGetter) close() {}

// errHitLoaded is what a hit that loads returns: it must not happen.
var errHitLoaded = errors.New("a hit called the loader")

// runHit reads one fresh key in a closed loop from every goroutine.
func runHit(j job, g getter, start time.Time) *podResult {
	load := func(context.Context) (Item, error) { return Item{}, errHitLoaded }
	end := start.Add(j.Duration)
	time.Sleep(time.Until(start))
	var (
		mu  sync.Mutex // guards res
		res = &podResult{}
		wg  sync.WaitGroup
	)
	for range j.Goroutines {
		wg.Go(func() {
			var mine podResult
			ctx := context.Background()
			for t0 := time.Now(); t0.Before(end); t0 = time.Now() {
				it, err := g.get(ctx, j.Key, load)
				if err == nil && it.ID != 42 {
					err = fmt.Errorf("read a wrong item %+v", it)
				}
				mine.record(0, time.Since(t0), err, false)
			}
			mu.Lock()
			res.merge(&mine)
			mu.Unlock()
		})
	}
	wg.Wait()
	return res
}
