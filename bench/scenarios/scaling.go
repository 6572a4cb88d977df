package scenarios

import (
	"context"
	"fmt"
	"strconv"

	"github.com/hotkv/stampede/bench/report"
)

// Scaling repeats the cold stampede as the number of processes grows
// (ScaleProcs, one key, Goroutines per process, loader Load) and as the
// number of distinct keys grows (ScaleKeys, Procs processes, loader
// ScaleLoad).
//
// With N keys every process asks for every key, max(1, Goroutines/N)
// times in a row, all processes in the same order so that they collide on
// each key. So that 10 000 keys stay bounded, a process then runs up to
// 256 goroutines (one per 40 requests) and the loader is short.
func Scaling(ctx context.Context, e *Env, r *report.Results) error {
	c := e.Cfg
	for _, p := range c.ScaleProcs {
		for _, a := range Approaches() {
			e.Progress.Step(fmt.Sprintf("scaling · %d processes · %s", p, report.Label(a)), 0)
			o, err := coldRun(ctx, e, coldSpec{approach: a, ns: e.key("scale-procs", strconv.Itoa(p), a), procs: p,
				keys: 1, perKey: c.Goroutines, goroutines: c.Goroutines, load: c.Load})
			if err != nil {
				return fmt.Errorf("%d processes, %s: %w", p, a, err)
			}
			r.ScaleProcs = append(r.ScaleProcs, report.Scale{Axis: "procs", X: p, Approach: a, Procs: p, Keys: 1,
				Requests: o.requests, Errors: o.errors, FirstError: o.firstErr, LoaderCalls: o.loads, Latency: summarize(o.lat)})
		}
	}
	for _, k := range c.ScaleKeys {
		perKey := max(1, (c.Goroutines+k-1)/k)
		goroutines := min(256, max(c.Goroutines, k*perKey/40))
		procs := c.Procs
		for _, a := range Approaches() {
			e.Progress.Step(fmt.Sprintf("scaling · %d keys · %s", k, report.Label(a)), 0)
			o, err := coldRun(ctx, e, coldSpec{approach: a, ns: e.key("scale-keys", strconv.Itoa(k), a), procs: procs,
				keys: k, perKey: perKey, goroutines: goroutines, load: c.ScaleLoad})
			if err != nil {
				return fmt.Errorf("%d keys, %s: %w", k, a, err)
			}
			r.ScaleKeys = append(r.ScaleKeys, report.Scale{Axis: "keys", X: k, Approach: a, Procs: procs, Keys: k,
				Requests: o.requests, Errors: o.errors, FirstError: o.firstErr, LoaderCalls: o.loads, Latency: summarize(o.lat)})
			// Many live keys slow the embedded server down (its clock
			// visits every key), so that each run starts from an empty one.
			if err := e.Cleanup(ctx); err != nil {
				return fmt.Errorf("clean up after %d keys: %w", k, err)
			}
		}
	}
	return nil
}
