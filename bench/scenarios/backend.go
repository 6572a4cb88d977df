package scenarios

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/bench/report"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redisx"
)

// The backend-cap scenario's shape: backendCap permits fleet-wide,
// backendKeys distinct absent keys at once (backendKeysQuick with -quick).
const (
	backendCap       = 4
	backendKeys      = 200
	backendKeysQuick = 60
)

// BackendCap is the backend cap (cache.Options.Backends): Procs pods ask
// for distinct absent keys all at once (each key by one pod, so every key
// is one load), first without a cap, then with the backend capped at
// backendCap. The loader takes Load; it INCRs a shared counter when it
// begins and DECRs it when it ends, so the largest value an INCR returned
// is the most loads the backend saw at once, fleet-wide.
func BackendCap(ctx context.Context, e *Env, r *report.Results) error {
	c := e.Cfg
	keys := backendKeys
	if c.Quick {
		keys = backendKeysQuick
	}
	perPod := (keys + c.Procs - 1) / c.Procs
	keys = perPod * c.Procs
	var uncapped float64
	for _, limit := range []int{0, backendCap} {
		name := "no cap"
		if limit > 0 {
			name = fmt.Sprintf("cap %d", limit)
		}
		// Capped: keys/limit rounds of Load.
		est := c.Load + 100*time.Millisecond
		if limit > 0 {
			est = time.Duration(keys/limit+1) * c.Load
		}
		e.Progress.Step("backend cap · "+name, est)
		ns := e.key("backend", strconv.Itoa(limit))
		counter := ns + ":loads"
		jobs := make([]job, c.Procs)
		for i := range jobs {
			jobs[i] = job{Kind: "backend", NS: ns, Keys: perPod, Goroutines: perPod, Counter: counter,
				Load: c.Load, TTL: 5 * time.Minute, Cap: limit}
		}
		res, _, err := e.Pods.Run(ctx, jobs, 2*time.Minute+est)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		m := merge(res)
		rounds := 1
		if limit > 0 {
			rounds = (keys + limit - 1) / limit
		}
		row := report.BackendCap{Cap: limit, Procs: c.Procs, Keys: keys, LoadMs: ms(c.Load), IdealMs: float64(rounds) * ms(c.Load), Requests: m.requests,
			Errors: m.errors, FirstError: m.firstErr, Latency: summarize(m.lat)}
		for _, p := range res {
			row.MaxConcurrent = max(row.MaxConcurrent, p.MaxConc)
			row.BackendWaits += p.BackendWaits
			row.TotalMs = max(row.TotalMs, float64(p.Elapsed)/1e6)
		}
		n, err := e.RDB.Get(ctx, counter).Int64()
		if err != nil && !redisx.IsNil(err) {
			return fmt.Errorf("read the loader counter: %w", err)
		}
		row.LoaderCalls = n
		if limit == 0 {
			uncapped = row.TotalMs
		}
		if uncapped > 0 {
			row.VsUncapped = row.TotalMs / uncapped
		}
		r.BackendCap = append(r.BackendCap, row)
	}
	return nil
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// runBackendJob is a pod's part of BackendCap: Goroutines goroutines each
// ask for one key of the pod's own, all at once, through a cache whose
// loads are capped at j.Cap (none when 0).
func runBackendJob(rdb *redis.Client, j job, in *bufio.Scanner, say func(string, ...any)) (*podResult, error) {
	ctx := context.Background()
	opts := &cache.Options{Namespace: j.NS, Expiry: cache.ExpiryPolicy{Fresh: j.TTL},
		WaitTimeout: time.Minute, LoadTimeout: time.Minute}
	if j.Cap > 0 {
		opts.Backends, opts.Backend = map[string]int{"db": j.Cap}, "db"
	}
	c, err := cache.New(rdb, opts)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	// First use probes the server and loads the scripts: pay it before.
	warm := func(context.Context) (string, error) { return "warm-up", nil }
	if _, err := cache.GetOrLoad(ctx, c, "warm-up-"+strconv.Itoa(j.Pod), warm); err != nil {
		return nil, fmt.Errorf("warm up: %w", err)
	}
	waits0 := c.Stats().BackendWaits
	cur := j.Counter + ":running"
	var peak atomic.Int64
	load := func(ctx context.Context) (string, error) {
		n, err := rdb.Incr(ctx, cur).Result()
		if err != nil {
			return "", err
		}
		defer rdb.Decr(context.WithoutCancel(ctx), cur)
		for old := peak.Load(); n > old && !peak.CompareAndSwap(old, n); old = peak.Load() {
		}
		if err := sleep(ctx, j.Load); err != nil { // the expensive work
			return "", err
		}
		return "v", rdb.Incr(ctx, j.Counter).Err()
	}
	start, err := awaitGo(in, say)
	if err != nil {
		return nil, err
	}
	time.Sleep(time.Until(start))
	var (
		mu  sync.Mutex // guards res
		res = &podResult{}
		wg  sync.WaitGroup
	)
	for g := range j.Goroutines {
		wg.Go(func() {
			key := "k" + strconv.Itoa(j.Pod) + "-" + strconv.Itoa(g)
			ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			t0 := time.Now()
			_, err := cache.GetOrLoad(ctx, c, key, load)
			lat := time.Since(t0)
			mu.Lock()
			res.record(0, lat, err, false)
			mu.Unlock()
		})
	}
	wg.Wait()
	res.Elapsed = int64(time.Since(start))
	res.MaxConc = peak.Load()
	res.BackendWaits = c.Stats().BackendWaits - waits0
	return res, nil
}
