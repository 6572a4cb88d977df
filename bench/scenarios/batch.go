package scenarios

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/viccon/sturdyc"

	"github.com/hotkv/stampede/bench/report"
	"github.com/hotkv/stampede/cache"
)

// BatchRefresh is issue 41's proof for batched refreshes: BatchKeys
// values, stored by pod 0 so that they fall due within BatchSpread of
// each other (BatchLead after it stored them), read by Procs processes at
// BatchRate requests per second together, one key per request (open loop:
// a ticker per process starts each request in a goroutine of its own;
// each process sweeps every key, from its own offset), through:
//
//   - a cache.Batcher per process (Window BatchWindow, MaxKeys
//     BatchMax): the refreshes falling due within a window in a process
//     go to the batch loader together, each key claimed by its rebuild
//     lock, so that the fleet refreshes it once;
//   - GetOrLoad per key: each stale key refreshed by a loader call of its
//     own (once in the fleet too);
//   - sturdyc in each process (GetOrFetchBatch of one id), its early
//     refreshes due within BatchSpread, BatchLead after each process
//     loaded every key, and WithRefreshCoalescing(BatchMax, BatchWindow):
//     each process refreshes its own copy of every key.
//
// The loader (BatchLoad per call) logs each call, with its keys' count,
// and counts each key it loads, in the server, so that every process
// counts. The requests that began before the first key fell due are the
// hit phase; those that began from then to the end of the last loader
// call the refresh phase.
func BatchRefresh(ctx context.Context, e *Env, r *report.Results) error {
	for _, a := range batchApproaches() {
		row, err := batchRun(ctx, e, a)
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		r.BatchRefresh = append(r.BatchRefresh, row)
	}
	return nil
}

func batchApproaches() []string {
	return []string{report.BatchBatcher, report.BatchGetOrLoad, report.BatchSturdyc}
}

// batchRun runs approach on e's pods and sums it up.
func batchRun(ctx context.Context, e *Env, approach string) (report.BatchRefresh, error) {
	c := e.Cfg
	tail := time.Second // after the last key fell due: every process sweeps every key within it
	duration := c.BatchLead + c.BatchSpread + tail
	e.Progress.Step(fmt.Sprintf("batched refreshes · %s · %d keys", approach, c.BatchKeys), duration)
	perPod := c.BatchRate / float64(c.Procs)
	interval := time.Duration(float64(time.Second) / perPod)
	ns := e.key("batch", strings.ReplaceAll(approach, " ", "-"))
	calls, loads := e.key("batch", approach, "calls"), e.key("batch", approach, "loads")
	jobs := make([]job, c.Procs)
	for i := range jobs {
		jobs[i] = job{Kind: "batch", Approach: approach, NS: ns, Rate: perPod, Load: c.BatchLoad, Keys: c.BatchKeys,
			PhaseShift: interval * time.Duration(i) / time.Duration(c.Procs), Duration: duration,
			Spread: c.BatchSpread, Lead: c.BatchLead, Window: c.BatchWindow, MaxKeys: c.BatchMax, Procs: c.Procs, List: calls, Counter: loads}
	}
	res, start, err := e.Pods.Run(ctx, jobs, duration+2*time.Minute)
	if err != nil {
		return report.BatchRefresh{}, err
	}
	logged, err := e.RDB.LRange(ctx, calls, 0, -1).Result()
	if err != nil {
		return report.BatchRefresh{}, err
	}
	perKey, err := e.RDB.HGetAll(ctx, loads).Result()
	if err != nil {
		return report.BatchRefresh{}, err
	}
	if err := e.RDB.Del(ctx, calls, loads).Err(); err != nil {
		return report.BatchRefresh{}, err
	}
	return batchSummary(approach, res, start, logged, perKey, c)
}

// batchSummary sums up one run: pod 0's result says when the first key
// fell due; logged is the loader's calls ("began ended keys", Unix µs),
// perKey how often each key was loaded.
func batchSummary(approach string, res []podResult, start time.Time, logged []string, perKey map[string]string, c Config) (report.BatchRefresh, error) {
	row := report.BatchRefresh{Approach: approach, Procs: len(res), Keys: c.BatchKeys, SpreadMs: millis(c.BatchSpread),
		Rate: c.BatchRate, LoadMs: millis(c.BatchLoad)}
	if approach != report.BatchGetOrLoad {
		row.WindowMs, row.MaxKeys = millis(c.BatchWindow), c.BatchMax
	}
	if len(res) == 0 || res[0].Due == 0 {
		return row, fmt.Errorf("batched refreshes: pod 0 did not say when the keys fall due")
	}
	due := res[0].Due - start.UnixMicro() // µs since the start
	end := due
	for _, l := range logged {
		f := strings.Fields(l)
		if len(f) != 3 {
			return row, fmt.Errorf("batched refreshes: loader log %q", l)
		}
		ended, err1 := strconv.ParseInt(f[1], 10, 64)
		n, err2 := strconv.Atoi(f[2])
		if err1 != nil || err2 != nil {
			return row, fmt.Errorf("batched refreshes: loader log %q", l)
		}
		row.Calls++
		row.Largest = max(row.Largest, n)
		end = max(end, ended-start.UnixMicro())
	}
	for _, v := range perKey {
		n, err := strconv.Atoi(v)
		if err != nil {
			return row, fmt.Errorf("batched refreshes: a key loaded %q times", v)
		}
		row.Refreshed++
		row.Loads += n
		if n > 1 {
			row.Twice++
		}
	}
	row.RefreshMs = float64(end-due) / 1000
	var hit, refresh []int64
	for _, r := range res {
		if len(r.At) != len(r.Lat) {
			return row, fmt.Errorf("batched refreshes: a pod reported %d requests, %d starts", len(r.Lat), len(r.At))
		}
		row.Requests += r.Requests
		row.Errors += r.Errors
		if row.FirstError == "" {
			row.FirstError = r.FirstErr
		}
		for i, at := range r.At {
			switch {
			case at < due:
				hit = append(hit, r.Lat[i])
			case at <= end:
				refresh = append(refresh, r.Lat[i])
			}
		}
	}
	row.Hit, row.Refresh = summarize(hit), summarize(refresh)
	return row, nil
}

// runBatchJob runs the pod's side of the batched refresh scenario: pod 0
// stores the keys, falling due from Lead on within Spread; every pod then
// reads them at Rate requests per second, sweeping every key from an
// offset of its own, for Duration.
func runBatchJob(rdb *redis.Client, j job, in *bufio.Scanner, say func(string, ...any)) (*podResult, error) {
	if j.Approach == report.BatchSturdyc {
		return runSturdycBatchJob(rdb, j, in, say)
	}
	ctx := context.Background()
	c, err := cache.New(rdb, &cache.Options{Namespace: j.NS, Expiry: cache.ExpiryPolicy{Fresh: time.Hour, Stale: time.Hour}})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	load := batchLoader(rdb, j)
	var get func(ctx context.Context, key string) (Item, error)
	switch j.Approach {
	case report.BatchBatcher:
		b, err := cache.NewBatcher(c, load, &cache.BatcherOptions{Window: j.Window, MaxKeys: j.MaxKeys})
		if err != nil {
			return nil, err
		}
		get = func(ctx context.Context, key string) (Item, error) { return b.Get(ctx, key) }
	case report.BatchGetOrLoad:
		get = func(ctx context.Context, key string) (Item, error) {
			return cache.GetOrLoad(ctx, c, key, func(ctx context.Context) (Item, error) {
				got, err := load(ctx, []string{key})
				return got[key], err
			})
		}
	default:
		return nil, fmt.Errorf("unknown batch approach %q", j.Approach)
	}
	// First-use costs (the probe, the scripts) on a key of this pod's own.
	warm := func(context.Context) (Item, error) { return newItem("warm-up"), nil }
	if _, err := cache.GetOrLoad(ctx, c, "warm-up-"+strconv.Itoa(j.Pod), warm); err != nil {
		return nil, fmt.Errorf("warm up: %w", err)
	}
	res := &podResult{}
	if j.Pod == 0 {
		due, err := storeFallingDue(ctx, c, j)
		if err != nil {
			return nil, err
		}
		res.Due = due.UnixMicro()
	}
	start, err := awaitGo(in, say)
	if err != nil {
		return nil, err
	}
	runBatchRequests(j, get, start, res)
	return res, nil
}

// runSturdycBatchJob is runBatchJob through sturdyc: every pod loads
// every key into its own cache (a loader that counts nothing), due for an
// early refresh between Lead and Lead+Spread after, then reads them at
// Rate requests per second as the other approaches do.
func runSturdycBatchJob(rdb *redis.Client, j job, in *bufio.Scanner, say func(string, ...any)) (*podResult, error) {
	ctx := context.Background()
	sc := sturdyc.New[Item](2*j.Keys, 8, time.Hour, 10,
		sturdyc.WithEarlyRefreshes(j.Lead, j.Lead+j.Spread, time.Hour, time.Second),
		sturdyc.WithRefreshCoalescing(j.MaxKeys, j.Window))
	keyFn := sc.BatchKeyFn("u")
	ids := make([]string, j.Keys)
	for i := range ids {
		ids[i] = batchKey(i)
	}
	warm := func(_ context.Context, ids []string) (map[string]Item, error) {
		out := make(map[string]Item, len(ids))
		for _, id := range ids {
			out[id] = newItem(id)
		}
		return out, nil
	}
	due := time.Now().Add(j.Lead)
	if _, err := sc.GetOrFetchBatch(ctx, ids, keyFn, warm); err != nil {
		return nil, fmt.Errorf("warm up: %w", err)
	}
	res := &podResult{}
	if j.Pod == 0 {
		res.Due = due.UnixMicro()
	}
	load := batchLoader(rdb, j)
	get := func(ctx context.Context, key string) (Item, error) {
		got, err := sc.GetOrFetchBatch(ctx, []string{key}, keyFn, load)
		return got[key], err
	}
	start, err := awaitGo(in, say)
	if err != nil {
		return nil, err
	}
	runBatchRequests(j, get, start, res)
	return res, nil
}

// batchKey is the i-th key of the scenario.
func batchKey(i int) string { return "u" + strconv.Itoa(i) }

// storeFallingDue stores j.Keys values, key i fresh until due + i ×
// Spread/Keys, and returns due (Lead from now).
func storeFallingDue(ctx context.Context, c *cache.Cache, j job) (time.Time, error) {
	due := time.Now().Add(j.Lead)
	errs := make(chan error, j.Keys)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range j.Keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			k := batchKey(i)
			until := due.Add(j.Spread * time.Duration(i) / time.Duration(j.Keys))
			errs <- cache.Set(ctx, c, k, newItem(k), cache.WithExpiry(cache.Expiry{Fresh: time.Until(until), Stale: time.Hour}))
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return due, fmt.Errorf("store the keys: %w", err)
		}
	}
	return due, nil
}

// batchLoader is the scenario's batch loader: it takes j.Load per call,
// logs the call in j.List ("began ended keys", Unix µs) and counts each
// key it loads in the hash j.Counter.
func batchLoader(rdb *redis.Client, j job) func(context.Context, []string) (map[string]Item, error) {
	return func(ctx context.Context, keys []string) (map[string]Item, error) {
		began := time.Now()
		if err := sleep(ctx, j.Load); err != nil { // the expensive query
			return nil, err
		}
		out := make(map[string]Item, len(keys))
		pipe := rdb.Pipeline()
		for _, k := range keys {
			out[k] = newItem(k)
			pipe.HIncrBy(ctx, j.Counter, k, 1)
		}
		pipe.RPush(ctx, j.List, fmt.Sprintf("%d %d %d", began.UnixMicro(), time.Now().UnixMicro(), len(keys)))
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err
		}
		return out, nil
	}
}

// runBatchRequests sends j.Rate requests per second (open loop, as
// runHot), request n for key (offset + n) mod Keys, each timed from its
// tick, for j.Duration.
func runBatchRequests(j job, get func(context.Context, string) (Item, error), start time.Time, res *podResult) {
	interval := time.Duration(float64(time.Second) / j.Rate)
	offset := j.Pod * j.Keys / max(1, j.Procs)
	end := start.Add(j.Duration)
	time.Sleep(time.Until(start.Add(j.PhaseShift)))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var (
		mu sync.Mutex // guards res
		wg sync.WaitGroup
	)
	n := 0
	for now := time.Now(); now.Before(end); now = <-tick.C {
		key := batchKey((offset + n) % j.Keys)
		n++
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			it, err := get(ctx, key)
			if err == nil && it.Name != key {
				err = fmt.Errorf("%s: read %q", key, it.Name)
			}
			lat := time.Since(now)
			mu.Lock()
			res.record(now.Sub(start), lat, err, true)
			mu.Unlock()
		})
	}
	wg.Wait()
}
