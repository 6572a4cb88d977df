package report

import (
	"fmt"
	"slices"
	"strings"
)

// GapRun is one traced cold run of the cold-gap scenario.
type GapRun struct {
	LoaderCalls int64   `json:"loader_calls"`
	Errors      int     `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	Latency     Latency `json:"latency"`
	// FirstLoadMs is when the first loader started, since the burst's
	// start: what finding the key absent and claiming it cost.
	FirstLoadMs float64 `json:"first_load_ms"`
	// AfterLoad is how long after the end of the load that served it
	// each request returned: the write, the announcement, the wake-up.
	AfterLoad Latency `json:"after_load"`
}

// ColdGap is one approach in one shape of the cold-gap scenario: the
// medians of its runs, and its p99 less the baseline's (the first
// approach, singleflight per process) in the same run.
type ColdGap struct {
	Approach      string   `json:"approach"`
	Procs         int      `json:"procs"`
	Goroutines    int      `json:"goroutines"`
	Runs          []GapRun `json:"runs"`
	LoaderCalls   int64    `json:"loader_calls"` // the most of any run
	Errors        int      `json:"errors"`
	FirstError    string   `json:"first_error,omitempty"`
	P50           float64  `json:"p50_ms"`
	P99           float64  `json:"p99_ms"`
	P99OverBase   float64  `json:"p99_over_baseline_ms"`
	FirstLoadMs   float64  `json:"first_load_ms"`
	AfterLoadP50  float64  `json:"after_load_p50_ms"`
	AfterLoadP99  float64  `json:"after_load_p99_ms"`
	BaselineP99Ms float64  `json:"baseline_p99_ms"`
}

// NewColdGap summarises runs of approach against the baseline's runs.
func NewColdGap(approach string, procs, goroutines int, runs, base []GapRun) ColdGap {
	g := ColdGap{Approach: approach, Procs: procs, Goroutines: goroutines, Runs: runs}
	for _, r := range runs {
		g.LoaderCalls = max(g.LoaderCalls, r.LoaderCalls)
		g.Errors += r.Errors
		if g.FirstError == "" {
			g.FirstError = r.FirstError
		}
	}
	pick := func(rs []GapRun, f func(GapRun) float64) float64 {
		var v []float64
		for _, r := range rs {
			v = append(v, f(r))
		}
		return median(v)
	}
	g.P50 = pick(runs, func(r GapRun) float64 { return r.Latency.P50 })
	g.P99 = pick(runs, func(r GapRun) float64 { return r.Latency.P99 })
	g.FirstLoadMs = pick(runs, func(r GapRun) float64 { return r.FirstLoadMs })
	g.AfterLoadP50 = pick(runs, func(r GapRun) float64 { return r.AfterLoad.P50 })
	g.AfterLoadP99 = pick(runs, func(r GapRun) float64 { return r.AfterLoad.P99 })
	g.BaselineP99Ms = pick(base, func(r GapRun) float64 { return r.Latency.P99 })
	g.P99OverBase = g.P99 - g.BaselineP99Ms
	return g
}

// LockGapRun is one run of the lock-gap scenario for one approach.
type LockGapRun struct {
	Cycles     int     `json:"cycles"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	PerSec     float64 `json:"cycles_per_s"`
	Latency    Latency `json:"latency"`
}

// LockGap is one approach of the lock-gap scenario: the median of its
// runs, and its ratio to the raw commands' median in the same run.
type LockGap struct {
	Approach   string       `json:"approach"`
	Procs      int          `json:"procs"`
	Goroutines int          `json:"goroutines"`
	Runs       []LockGapRun `json:"runs"`
	Errors     int          `json:"errors"`
	FirstError string       `json:"first_error,omitempty"`
	PerSec     float64      `json:"cycles_per_s"`
	P99        float64      `json:"p99_ms"`
	VsRaw      float64      `json:"vs_raw"`
}

// NewLockGap summarises runs of approach against the raw commands' runs.
func NewLockGap(approach string, procs, goroutines int, runs, raw []LockGapRun) LockGap {
	g := LockGap{Approach: approach, Procs: procs, Goroutines: goroutines, Runs: runs}
	var per, p99, base []float64
	for _, r := range runs {
		per, p99 = append(per, r.PerSec), append(p99, r.Latency.P99)
		g.Errors += r.Errors
		if g.FirstError == "" {
			g.FirstError = r.FirstError
		}
	}
	for _, r := range raw {
		base = append(base, r.PerSec)
	}
	g.PerSec, g.P99 = median(per), median(p99)
	if b := median(base); b > 0 {
		g.VsRaw = g.PerSec / b
	}
	return g
}

// median of v (0 for none); the mean of the middle two for an even count.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// fine formats milliseconds to a tenth, as the gaps need.
func fine(v float64) string { return fmt.Sprintf("%.1f ms", v) }

func signed(v float64) string { return fmt.Sprintf("%+.1f ms", v) }

// gapTables renders the gap scenarios.
func gapTables(r *Results) []table {
	var ts []table
	if len(r.ColdGap) > 0 {
		runs := len(r.ColdGap[0].Runs)
		t := table{
			title: "Cold gap",
			about: fmt.Sprintf("The cold stampede against singleflight per process, %d runs each, approaches in alternating order; "+
				"medians of the runs. The loader takes %s. \"vs singleflight\" is the p99 less singleflight's in the same runs; "+
				"\"first load\" is when the first loader started after the burst began (the claim); "+
				"\"after load\" is how long after the end of the load that served it a request returned (the write, the announcement, the wake-up).",
				runs, ms(r.Config.LoadMs)),
			header: []string{"processes × goroutines", "approach", "loader calls", "p50", "p99", "vs singleflight",
				"first load", "after load p50", "after load p99", "errors"},
		}
		for _, x := range r.ColdGap {
			over := signed(x.P99OverBase)
			if x.Approach == "singleflight" {
				over = "-"
			}
			t.rows = append(t.rows, []string{fmt.Sprintf("%d × %d", x.Procs, x.Goroutines), Label(x.Approach),
				fmt.Sprint(x.LoaderCalls), fine(x.P50), fine(x.P99), over, fine(x.FirstLoadMs),
				fine(x.AfterLoadP50), fine(x.AfterLoadP99), errs(x.Errors, x.FirstError)})
		}
		ts = append(ts, t)
	}
	if len(r.LockGap) > 0 {
		x0 := r.LockGap[0]
		t := table{
			title: "Lock gap",
			about: fmt.Sprintf("Obtain (nil options) + Release against the raw commands they send, from %d processes × %d goroutines, "+
				"one key per goroutine, %d runs each in alternating order; medians of the runs.", x0.Procs, x0.Goroutines, len(x0.Runs)),
			header: []string{"approach", "cycles/s", "× raw", "p99", "runs (cycles/s)", "errors"},
		}
		for _, x := range r.LockGap {
			var each []string
			for _, run := range x.Runs {
				each = append(each, fmt.Sprintf("%.0f", run.PerSec))
			}
			t.rows = append(t.rows, []string{x.Approach, fmt.Sprintf("%.0f", x.PerSec), fmt.Sprintf("%.2f×", x.VsRaw),
				ms(x.P99), strings.Join(each, " · "), errs(x.Errors, x.FirstError)})
		}
		ts = append(ts, t)
	}
	return ts
}
