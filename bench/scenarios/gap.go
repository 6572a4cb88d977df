package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hotkv/stampede/bench/report"
)

// The gap scenarios put stampede next to the floor it must reach, in the
// same run and repeated (Config.Reps, approaches in alternating order),
// so that a drift of the machine during the run falls on both:
//
//   - cold-gap: the cold stampede against singleflight per process, which
//     loads in every process but coalesces within each at no cost; the
//     question is how much of its latency stampede's one load across
//     processes costs. Each run is traced: when the first loader started
//     (what the claim costs before the load) and how long after the load
//     that served it each request returned (the write, the announcement,
//     the wake-up and the hand-back).
//   - lock-gap: Obtain + Release against the raw commands they send (SET
//     NX PX, then DELEX IFEQ, DELIFEQ or a Lua compare-and-delete, what
//     the server offers), next to rueidislock and to the raw commands
//     and stampede on go-redis's AutoPipeline, from Procs processes of
//     LockGoroutines goroutines, one key each.

// GapShape is one cold-gap configuration.
type GapShape struct{ Procs, Goroutines int }

// broadcastApproach is stampede with Options.Broadcast: one announcement
// channel for the namespace instead of one per key (cold-gap only).
const broadcastApproach = "stampede-broadcast"

// gapApproaches are the approaches of cold-gap; the baseline first, then
// sturdyc (the other floor: a cache in process memory, no round trip at
// all), the near cache last (left out where the server does not track
// keys).
func gapApproaches() []string {
	return []string{"singleflight", sturdycApproach, "stampede", broadcastApproach, nearApproach}
}

// ColdGap runs the cold stampede for every shape in Config.GapShapes,
// Config.Reps times per approach.
func ColdGap(ctx context.Context, e *Env, r *report.Results) error {
	c := e.Cfg
	approaches := gapApproaches()
	if !e.NearWorks(ctx) {
		approaches = approaches[:len(approaches)-1]
		e.noteNoNear(&r.Notes)
	}
	for _, sh := range c.GapShapes {
		runs := map[string][]report.GapRun{}
		for rep := range c.Reps {
			order := slices.Clone(approaches)
			if rep%2 == 1 {
				slices.Reverse(order)
			}
			for _, a := range order {
				e.Progress.Step(fmt.Sprintf("cold gap · %d × %d · %s · run %d", sh.Procs, sh.Goroutines, report.Label(a), rep+1), c.Load+100*time.Millisecond)
				ns := e.key("gap", fmt.Sprint(sh.Procs, "x", sh.Goroutines), a, fmt.Sprint(rep))
				o, err := coldRun(ctx, e, coldSpec{approach: a, ns: ns, procs: sh.Procs, keys: 1,
					perKey: sh.Goroutines, goroutines: sh.Goroutines, load: c.Load, trace: true})
				if err != nil {
					return fmt.Errorf("cold gap %s: %w", a, err)
				}
				runs[a] = append(runs[a], o.gapRun())
			}
		}
		for _, a := range approaches {
			r.ColdGap = append(r.ColdGap, report.NewColdGap(a, sh.Procs, sh.Goroutines, runs[a], runs[approaches[0]]))
		}
	}
	return nil
}

// gapRun is what one traced cold run found.
func (o coldOutcome) gapRun() report.GapRun {
	g := report.GapRun{LoaderCalls: o.loads, Errors: o.errors, FirstError: o.firstErr, Latency: summarize(o.lat)}
	if len(o.loadStarts) > 0 {
		g.FirstLoadMs = float64(slices.Min(o.loadStarts)) / 1000
	}
	g.AfterLoad = summarize(o.afterLoad)
	return g
}

// LockGap measures Obtain + Release against the raw commands, Config.Reps
// times each, from Config.Procs processes.
func LockGap(ctx context.Context, e *Env, r *report.Results) error {
	c := e.Cfg
	runs := map[string][]report.LockGapRun{}
	approaches := []string{"raw", "stampede", rueidislockApproach, "raw" + autopipelineSuffix, "stampede" + autopipelineSuffix}
	for rep := range c.Reps {
		order := slices.Clone(approaches)
		if rep%2 == 1 {
			slices.Reverse(order)
		}
		for _, a := range order {
			e.Progress.Step(fmt.Sprintf("lock gap · %s · run %d", lockGapLabel(a), rep+1), c.LockDuration)
			jobs := make([]job, c.Procs)
			for i := range jobs {
				jobs[i] = job{Kind: "lock-cycles", Approach: a, NS: e.key("lockgap", a, fmt.Sprint(rep)),
					Goroutines: c.LockGoroutines, Duration: c.LockDuration}
			}
			res, _, err := e.Pods.Run(ctx, jobs, time.Minute+2*c.LockDuration)
			if err != nil {
				return fmt.Errorf("lock gap %s: %w", a, err)
			}
			m := merge(res)
			runs[a] = append(runs[a], report.LockGapRun{Cycles: m.requests, Errors: m.errors, FirstError: m.firstErr,
				PerSec: float64(m.requests) / c.LockDuration.Seconds(), Latency: summarize(m.lat)})
		}
	}
	for _, a := range approaches {
		r.LockGap = append(r.LockGap, report.NewLockGap(lockGapLabel(a), c.Procs, c.LockGoroutines, runs[a], runs["raw"]))
	}
	return nil
}

func lockGapLabel(a string) string {
	if a == rueidislockApproach {
		return "rueidislock TryWithContext + release (1 key)"
	}
	base, ap := strings.CutSuffix(a, autopipelineSuffix)
	label := "stampede Obtain + Release"
	if base == "raw" {
		label = "raw SET NX PX + compare-and-delete"
	}
	if ap {
		label += ", on go-redis's AutoPipeline"
	}
	return label
}
