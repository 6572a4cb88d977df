package report

import "fmt"

// The approaches of the batched refresh scenario.
const (
	// BatchBatcher is a cache.Batcher per process: the refreshes falling
	// due within its Window sent to the batch loader together.
	BatchBatcher = "Batcher"
	// BatchGetOrLoad is GetOrLoad per key: each stale key refreshed by a
	// loader call of its own.
	BatchGetOrLoad = "GetOrLoad"
	// BatchSturdyc is sturdyc v1.1.5 in each process, its early refreshes
	// falling due within the same spread, with WithRefreshCoalescing of
	// the Batcher's Window and MaxKeys: every process holds and refreshes
	// its own copy of every key.
	BatchSturdyc = "sturdyc coalescing"
)

// BatchRefresh is one approach's run in the batched refresh scenario:
// Keys values falling due within SpreadMs of each other, read by Procs
// processes at Rate requests per second together, one key per request.
type BatchRefresh struct {
	Approach string  `json:"approach"`
	Procs    int     `json:"procs"`
	Keys     int     `json:"keys"`
	SpreadMs float64 `json:"spread_ms"`
	Rate     float64 `json:"rate_per_s"`
	LoadMs   float64 `json:"load_ms"`
	WindowMs float64 `json:"window_ms,omitempty"` // the Batcher's
	MaxKeys  int     `json:"max_keys,omitempty"`  // the Batcher's

	// Calls counts the loader's calls fleet-wide during the refresh;
	// Largest is the most keys one of them had.
	Calls   int `json:"calls"`
	Largest int `json:"largest"`
	// Refreshed counts the keys loaded at least once, Twice those loaded
	// more than once, Loads the keys' loads, fleet-wide.
	Refreshed int `json:"refreshed"`
	Loads     int `json:"loads"`
	Twice     int `json:"twice"`
	// RefreshMs is from the first key falling due to the end of the last
	// loader call.
	RefreshMs float64 `json:"refresh_ms"`

	Requests   int    `json:"requests"`
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// Hit is the requests that began before the first key fell due (every
	// key fresh); Refresh those that began from then to the end of the
	// last loader call.
	Hit     Latency `json:"hit"`
	Refresh Latency `json:"refresh"`
}

// batchTables returns the batched refresh scenario's table.
func batchTables(r *Results) []table {
	if len(r.BatchRefresh) == 0 {
		return nil
	}
	f := r.BatchRefresh[0]
	var b *BatchRefresh
	for i := range r.BatchRefresh {
		if r.BatchRefresh[i].Approach == BatchBatcher {
			b = &r.BatchRefresh[i]
		}
	}
	about := fmt.Sprintf("%d keys falling due within %s, read across %d processes at %.0f requests/s together (open loop, one key "+
		"per request, each process sweeping every key), loader %s per call. Loader calls and keys loaded are counted fleet-wide, "+
		"from the first key due to the end of the last loader call (\"refresh\"); \"hit\" is the requests before it, every key fresh.",
		f.Keys, ms(f.SpreadMs), f.Procs, f.Rate, ms(f.LoadMs))
	if b != nil {
		about += fmt.Sprintf(" Batcher: Window %s, MaxKeys %d.", ms(b.WindowMs), b.MaxKeys)
		about += fmt.Sprintf(" sturdyc (v1.1.5, a cache in each process's memory): early refreshes due within the same %s, "+
			"WithRefreshCoalescing(%d, %s), every key read through GetOrFetchBatch of one id.", ms(f.SpreadMs), b.MaxKeys, ms(b.WindowMs))
	}
	t := table{
		title:  "Batched refreshes",
		about:  about,
		header: []string{"approach", "loader calls", "largest", "keys refreshed", "key loads", "loaded twice", "refresh took", "hit p50", "hit p99", "refresh p50", "refresh p99", "p99 ÷ hit", "max", "errors"},
	}
	for _, x := range r.BatchRefresh {
		t.rows = append(t.rows, []string{x.Approach, fmt.Sprint(x.Calls), fmt.Sprint(x.Largest), fmt.Sprintf("%d of %d", x.Refreshed, x.Keys),
			fmt.Sprint(x.Loads), fmt.Sprint(x.Twice), ms(x.RefreshMs), ms(x.Hit.P50), ms(x.Hit.P99), ms(x.Refresh.P50), ms(x.Refresh.P99),
			ratio(x.Refresh.P99, x.Hit.P99), ms(x.Refresh.Max), errs(x.Errors, x.FirstError)})
	}
	return []table{t}
}
