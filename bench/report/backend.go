package report

import "fmt"

// BackendCap is one run of the backend-cap scenario: Procs processes
// asking for Keys distinct absent keys at once, each loaded once, with
// the loads against the backend capped at Cap fleet-wide
// (cache.Options.Backends), or not capped (Cap 0).
type BackendCap struct {
	Cap        int     `json:"cap"` // 0: no cap
	Procs      int     `json:"procs"`
	Keys       int     `json:"keys"`
	LoadMs     float64 `json:"load_ms"`
	Requests   int     `json:"requests"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	// LoaderCalls counts the loader's calls, fleet-wide (INCR).
	LoaderCalls int64 `json:"loader_calls"`
	// MaxConcurrent is the most loads the backend saw running at once,
	// fleet-wide: the largest value the loaders' INCR of a shared
	// counter returned (each DECRs it when done).
	MaxConcurrent int64 `json:"max_concurrent"`
	// BackendWaits is the loads that waited for a permit (the sum of
	// cache.Stats.BackendWaits).
	BackendWaits uint64 `json:"backend_waits"`
	// TotalMs is how long the burst took: from the start to the last
	// request's answer.
	TotalMs float64 `json:"total_ms"`
	// VsUncapped is TotalMs over the uncapped run's of the same run of
	// the bench (1 for that run).
	VsUncapped float64 `json:"vs_uncapped"`
	// IdealMs is the least the burst can take: one load without a cap,
	// ⌈Keys/Cap⌉ loads one after the other with one.
	IdealMs float64 `json:"ideal_ms"`
	Latency Latency `json:"latency"`
}

// backendTables renders the backend-cap scenario.
func backendTables(r *Results) []table {
	if len(r.BackendCap) == 0 {
		return nil
	}
	x0 := r.BackendCap[0]
	t := table{
		title: "Backend cap",
		about: fmt.Sprintf("%d distinct absent keys asked for at once from %d processes (each key by one of them), loader %s, "+
			"without a cap and with cache.Options.Backends capping the loads fleet-wide; \"max at once\" is the most loads "+
			"the backend saw running at the same time (a shared INCR/DECR counter); \"× uncapped\" compares the burst's total time "+
			"with the uncapped run's in the same bench run; \"ideal\" is the least it can take (⌈keys/cap⌉ loads in a row).", x0.Keys, x0.Procs, ms(x0.LoadMs)),
		header: []string{"cap", "loader calls", "max at once", "waited for a permit", "total", "× uncapped", "ideal", "× ideal", "p50", "p99", "errors"},
	}
	for _, x := range r.BackendCap {
		c := "none"
		if x.Cap > 0 {
			c = fmt.Sprint(x.Cap)
		}
		t.rows = append(t.rows, []string{c, fmt.Sprint(x.LoaderCalls), fmt.Sprint(x.MaxConcurrent), fmt.Sprint(x.BackendWaits),
			ms(x.TotalMs), fmt.Sprintf("%.2f×", x.VsUncapped), ms(x.IdealMs), fmt.Sprintf("%.2f×", x.TotalMs/max(x.IdealMs, 1e-9)), ms(x.Latency.P50), ms(x.Latency.P99), errs(x.Errors, x.FirstError)})
	}
	return []table{t}
}
