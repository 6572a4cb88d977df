package scenarios

import (
	"context"
	"fmt"
	"time"

	"github.com/hotkv/stampede/bench/report"
	"github.com/hotkv/stampede/internal/redisx"
)

// Cold is the cold stampede: Procs processes × Goroutines goroutines ask
// for one absent key at the same instant. The loader takes Load and counts
// its calls with INCR on the server, so that every process counts.
func Cold(ctx context.Context, e *Env, r *report.Results) error {
	c := e.Cfg
	approaches := cacheApproaches(ctx, e, &r.Notes)
	if len(approaches) == len(Approaches()) {
		e.Progress.Step("cold stampede · "+report.Label(nearApproach)+": skipped", 0)
	}
	for _, a := range approaches {
		e.Progress.Step(fmt.Sprintf("cold stampede · %s", report.Label(a)), c.Load+100*time.Millisecond)
		o, err := coldRun(ctx, e, coldSpec{approach: a, ns: e.key("cold", a), procs: c.Procs, keys: 1,
			perKey: c.Goroutines, goroutines: c.Goroutines, load: c.Load})
		if err != nil {
			return fmt.Errorf("%s: %w", a, err)
		}
		r.Cold = append(r.Cold, report.Cold{Approach: a, Procs: c.Procs, Goroutines: c.Goroutines,
			Requests: o.requests, Errors: o.errors, FirstError: o.firstErr, LoaderCalls: o.loads, Latency: summarize(o.lat), NearHits: o.nearHits})
	}
	return nil
}

// coldSpec is one cold run: procs pods, each with goroutines working
// through keys keys, each asked for perKey times in a row (all pods in the
// same order, so that they collide).
type coldSpec struct {
	approach, ns                    string
	procs, keys, perKey, goroutines int
	load                            time.Duration
	trace                           bool // record when loads ran and requests returned (one key only)
}

type coldOutcome struct {
	merged
	loads, nearHits int64
	// With coldSpec.trace, in µs since the run's start: when each load
	// began, and how long after the end of the load that served it each
	// request returned (for stampede the one load, in whichever process
	// it ran; for the per-process approaches the process's own).
	loadStarts, afterLoad []int64
}

func coldRun(ctx context.Context, e *Env, s coldSpec) (coldOutcome, error) {
	counter := s.ns + ":loads"
	jobs := make([]job, s.procs)
	for i := range jobs {
		jobs[i] = job{Kind: "cold", Approach: s.approach, NS: s.ns, Keys: s.keys, PerKey: s.perKey,
			Goroutines: s.goroutines, Counter: counter, Load: s.load, TTL: 5 * time.Minute, Trace: s.trace}
	}
	// Bounded generously: the slowest approach (a poll per key) stays far
	// below this.
	limit := 2*time.Minute + time.Duration(s.keys*s.perKey/s.goroutines+1)*(s.load+100*time.Millisecond)
	res, _, err := e.Pods.Run(ctx, jobs, limit)
	if err != nil {
		return coldOutcome{}, err
	}
	o := coldOutcome{merged: merge(res)}
	for _, r := range res {
		o.nearHits += r.NearHits
	}
	if s.trace {
		o.traced(res)
	}
	n, err := e.RDB.Get(ctx, counter).Int64()
	switch {
	case redisx.IsNil(err):
	case err != nil:
		return o, fmt.Errorf("read the loader counter: %w", err)
	}
	o.loads = n
	if err := e.RDB.Del(ctx, counter).Err(); err != nil {
		return o, err
	}
	return o, nil
}

// traced fills in loadStarts and afterLoad from the pods' traces. A
// request is served by its own process's load if it ran one, else by the
// load that ended first (with one load in the cluster, that load).
func (o *coldOutcome) traced(res []podResult) {
	first := int64(-1)
	for _, r := range res {
		for _, l := range r.Loads {
			o.loadStarts = append(o.loadStarts, l[0])
			if first < 0 || l[1] < first {
				first = l[1]
			}
		}
	}
	for _, r := range res {
		end := first
		if len(r.Loads) > 0 {
			end = r.Loads[0][1]
		}
		if end < 0 {
			continue
		}
		for _, at := range r.Ends {
			o.afterLoad = append(o.afterLoad, at-end)
		}
	}
}
