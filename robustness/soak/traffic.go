// This file holds the traffic generation: the goroutines a run starts
// (readers, writers, lockers, HTTP clients, the fault schedule), and the
// readers and writers of the Cache with the stale-read check.

package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/redis/go-redis/v9"
)

// traffic runs readers, writers, lockers, HTTP clients and the fault
// schedule until ctx ends, then lifts every fault and closes the HTTP
// connections (see web.idle).
// phase separates the random streams of the warm-up and the run.
func (w *worker) traffic(ctx context.Context, phase uint64) {
	var wg sync.WaitGroup
	seed := func(role, i uint64) *rand.Rand {
		return rand.New(rand.NewPCG(w.cfg.Seed, uint64(w.cfg.Index)<<32|phase<<24|role<<16|i))
	}
	for i := range w.cfg.Readers {
		wg.Go(func() { w.reader(ctx, seed(1, uint64(i))) })
	}
	for i := range w.cfg.Writers {
		wg.Go(func() { w.writer(ctx, seed(2, uint64(i))) })
	}
	for i := range w.cfg.Lockers {
		wg.Go(func() { w.locker(ctx, seed(3, uint64(i))) })
	}
	for i := range w.cfg.HTTP {
		wg.Go(func() { w.web.httpClient(ctx, seed(5, uint64(i))) })
	}
	wg.Go(func() { w.faultSchedule(ctx, seed(4, 0)) })
	wg.Go(func() { w.stalls.run(ctx) })
	wg.Wait()
	w.cacheP.Resume()
	w.lockP.Resume()
	w.web.idle()
}

// zipf picks keys with a few hot ones and a long tail.
func (w *worker) zipf(r *rand.Rand) *rand.Zipf {
	return rand.NewZipf(r, 1.1, 2, uint64(w.cfg.Keys-1))
}

// pause waits d or until ctx ends; it reports whether ctx is still live.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// loader reads the key's version from the database.
func (w *worker) loader(k int) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		w.loads.Add(1)
		n, err := w.direct.Get(ctx, dbKey(w.cfg.Prefix, k)).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return "", err
		}
		w.coh.history[k].add(time.Now().UnixNano(), "loader read version "+strconv.FormatInt(n, 10))
		return value(cacheKey(k), n, w.name()), nil
	}
}

// get is one GetOrLoad with the stale-read check: a call that begins after
// this process's Delete of k completed (the Delete followed the update to
// version v) should not return a version below v; and with the coherence
// check (checkRead): nor below the version of any worker's Delete that
// completed more than the coherence bound before it began. With viaGet it
// tries cache.Get first (a stale value counts as a value) and goes on to
// GetOrLoad only on a miss, so that both read paths (and both of the near
// cache's) are checked.
func (w *worker) get(ctx context.Context, k int, viaGet bool) {
	floor := w.minVer[k].Load()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	w.requests.Add(1)
	st := w.coh.start(k)
	op := "GetOrLoad"
	var v string
	err := cache.ErrMiss
	if viaGet {
		w.gets.Add(1)
		op = "Get"
		if v, err = cache.Get[string](ctx, w.c, cacheKey(k)); errors.Is(err, cache.ErrStale) {
			err = nil
		}
		if err != nil && !errors.Is(err, cache.ErrMiss) {
			if !errors.Is(err, context.Canceled) || ctx.Err() == nil {
				w.countErr(op, err)
			}
			return
		}
	}
	if err != nil { // a miss
		op = "GetOrLoad"
		if v, err = cache.GetOrLoad(ctx, w.c, cacheKey(k), w.loader(k)); err != nil {
			if !errors.Is(err, context.Canceled) || ctx.Err() == nil {
				w.countErr(op, err)
			}
			return
		}
	}
	key, ver, by, ok := parseValue(v)
	switch {
	case !ok || key != cacheKey(k):
		w.wrongValues.Add(1)
		w.sample(fmt.Sprintf("%s(%s) returned %q", op, cacheKey(k), v))
	case ver < floor && by == w.name():
		w.staleReadsLocal.Add(1)
		w.sample(fmt.Sprintf("%s: %s(%s) began after a Delete that followed version %d and returned %s, loaded by this process", w.name(), op, cacheKey(k), floor, v))
	case ver < floor:
		w.staleReads.Add(1)
		w.sample(fmt.Sprintf("%s: %s(%s) began after a Delete that followed version %d and returned %s, loaded by another process", w.name(), op, cacheKey(k), floor, v))
	}
	if ok && key == cacheKey(k) {
		w.checkRead(ctx, op, k, v, ver, st)
	}
}

// reader reads Zipf-distributed keys; one read in 8 starts with Get.
func (w *worker) reader(ctx context.Context, r *rand.Rand) {
	z := w.zipf(r)
	for pause(ctx, time.Duration(r.IntN(8))*time.Millisecond) {
		k := int(z.Uint64())
		w.get(ctx, k, r.IntN(8) == 0)
	}
}

// writer updates the database, then deletes the cached value through the
// faulty client, retrying until the Delete succeeds: until then a stale
// cached value is legitimate. A Delete that never succeeds takes its key
// out of the final comparison.
func (w *worker) writer(ctx context.Context, r *rand.Rand) {
	z := w.zipf(r)
	for pause(ctx, time.Duration(10+r.IntN(40))*time.Millisecond) {
		k := int(z.Uint64())
		// The update and its Delete run to the end even when the run
		// stops: a half-done write would leave a legitimately stale key.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		v, err := w.direct.Incr(wctx, dbKey(w.cfg.Prefix, k)).Result()
		if err != nil {
			cancel()
			w.countErr("database INCR", err)
			continue
		}
		deleted := false
		for attempt := 0; wctx.Err() == nil; attempt++ {
			dctx, dcancel := context.WithTimeout(wctx, time.Second)
			err := w.c.Delete(dctx, cacheKey(k))
			dcancel()
			if err == nil {
				deleted = true
				break
			}
			w.countErr("Delete (retried)", err)
			pause(wctx, time.Duration(min(attempt+1, 10))*20*time.Millisecond)
		}
		if !deleted {
			w.countErr("Delete abandoned", wctx.Err())
			w.mu.Lock()
			w.excluded[cacheKey(k)] = true
			w.mu.Unlock()
			cancel()
			continue
		}
		done := time.Now()
		w.coh.history[k].add(done.UnixNano(), "this worker's Delete after version "+strconv.FormatInt(v, 10)+" returned")
		raise(&w.minVer[k], v)
		if err := record.Run(wctx, w.direct, []string{delKey(w.cfg.Prefix, k), histKey(w.cfg.Prefix, k)}, v, done.UnixNano()).Err(); err != nil {
			w.countErr("database record", err)
		}
		if n := w.writes.Add(1); w.cfg.Sabotage && n%20 == 0 {
			// A stale set, on purpose: the version before the update, after the Delete.
			_ = cache.Set(wctx, w.c, cacheKey(k), value(cacheKey(k), v-1, "sabotage"))
		}
		cancel()
		// Read your own write: this call began after the Delete.
		w.get(ctx, k, false)
	}
}

// raise sets a to v if v is larger.
func raise(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}
