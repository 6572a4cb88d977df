package scenarios

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/hotkv/stampede/bench/report"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/lock"
)

// releaseStrategy is one way the lock package releases a lock.
type releaseStrategy struct {
	s      lock.ReleaseStrategy
	offers func(lock.Capabilities) bool // whether the server has it
	lacks  string                       // said when it does not
}

func releaseStrategies() []releaseStrategy {
	return []releaseStrategy{
		{lock.ReleaseDelex, func(c lock.Capabilities) bool { return c.Release == lock.ReleaseDelex }, "the server has no DELEX IFEQ"},
		{lock.ReleaseDelIfEq, func(c lock.Capabilities) bool { return c.DelIfEq }, "the server has no DELIFEQ"},
		{lock.ReleaseLua, func(lock.Capabilities) bool { return true }, ""},
	}
}

// Lock measures Obtain + Release cycles per second with each release
// strategy the server offers, forced through internal/redisx.Forced.
// It runs in this process: it measures the server commands, not
// coordination between processes. Each goroutine locks a key of its own,
// so no cycle waits for another.
func Lock(ctx context.Context, e *Env, r *report.Results) error {
	cfg := e.Cfg
	g := cfg.Goroutines
	for _, rs := range releaseStrategies() {
		e.Progress.Step("lock · release with "+rs.s.String(), cfg.LockDuration)
		row := report.Lock{Strategy: rs.s.String()}
		if !rs.offers(e.Caps) {
			row.Skipped = rs.lacks
			r.Lock = append(r.Lock, row)
			r.Notes = append(r.Notes, fmt.Sprintf("lock: %s skipped: %s.", rs.s, rs.lacks))
			continue
		}
		forced := e.Caps
		forced.Release = rs.s
		lc, err := lock.New(&redisx.Forced{Client: e.RDB, Caps: redisx.Mirror[redisx.Capabilities](forced)}, nil)
		if err != nil {
			return err
		}
		ns := e.key("lock", strconv.Itoa(int(rs.s)))
		end := time.Now().Add(cfg.LockDuration)
		var (
			mu  sync.Mutex // guards all
			all merged
			wg  sync.WaitGroup
		)
		for i := range g {
			wg.Go(func() {
				var mine merged
				key := ns + ":" + strconv.Itoa(i)
				for t0 := time.Now(); t0.Before(end) && ctx.Err() == nil; t0 = time.Now() {
					l, err := lc.Obtain(ctx, key, 10*time.Second)
					if err == nil {
						err = l.Release(ctx)
					}
					mine.requests++
					mine.lat = append(mine.lat, time.Since(t0).Microseconds())
					if err != nil {
						mine.errors++
						if mine.firstErr == "" {
							mine.firstErr = err.Error()
						}
					}
				}
				mu.Lock()
				all.requests += mine.requests
				all.errors += mine.errors
				if all.firstErr == "" {
					all.firstErr = mine.firstErr
				}
				all.lat = append(all.lat, mine.lat...)
				mu.Unlock()
			})
		}
		wg.Wait()
		if err := ctx.Err(); err != nil {
			return err
		}
		row.Goroutines, row.Cycles, row.Errors, row.FirstError = g, all.requests, all.errors, all.firstErr
		row.PerSec = float64(all.requests) / cfg.LockDuration.Seconds()
		row.Latency = summarize(all.lat)
		if used, err := lc.Capabilities(ctx); err == nil && used.Release != rs.s {
			r.Notes = append(r.Notes, fmt.Sprintf("lock: %s was refused at run time; the client fell back to %s.", rs.s, used.Release))
		}
		r.Lock = append(r.Lock, row)
	}
	return nil
}
