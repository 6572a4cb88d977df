package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The approaches of the page purge scenario.
const (
	// PageStampede is the middleware over a cache shared by every process.
	PageStampede = "stampede-page"
	// PagePerProcess is the model of per-process caches (baselines.PageCache).
	PagePerProcess = "per-process"
)

// PagePurge is one phase of one approach in the page purge scenario: a
// hot page under a steady load, before a purge or after one.
type PagePurge struct {
	Approach string `json:"approach"`
	// Phase is "steady" (before any purge) or the purge that began it:
	// "soft" (SoftPurgeTag), "hard" (PurgeTag), "every process" (the
	// per-process model's purge, told to each process).
	Phase string `json:"phase"`
	// Near is whether the stampede processes had a near cache.
	Near     bool    `json:"near,omitempty"`
	Procs    int     `json:"procs"`
	Rate     float64 `json:"rate_per_s"`
	PhaseS   float64 `json:"phase_s"`
	RenderMs float64 `json:"render_ms"`

	Requests   int    `json:"requests"`
	Errors     int    `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// Renders counts the handler's renders that began in the phase, fleet
	// wide; Conditional those that were conditional (If-None-Match: the
	// page's ETag, answered 304); RenderProcs the processes they ran in.
	Renders     int `json:"renders"`
	Conditional int `json:"conditional"`
	RenderProcs int `json:"render_procs"`
	// Slow counts requests slower than half the render time.
	Slow int `json:"slow"`
	// Across counts the requests in flight while the purge that began
	// this phase was being made (from their tick to their answer), which
	// may have found the page before or after it: they are in no figure
	// of either phase.
	Across int `json:"across,omitempty"`
	// AcrossServed counts those by how they were answered, as Served.
	AcrossServed map[string]int `json:"across_served,omitempty"`
	// Served counts the requests by how they were answered: "hit" (a
	// stored page), "stale" (a stored page served stale while one render
	// revalidates it), "miss" (the request's own render), "collapsed"
	// (another request's render that this one waited for), "not stored"
	// (the request's own render, which the middleware did not store and
	// gave to it alone: BYPASS, detail=not-stored), or what else the
	// status header said.
	Served  map[string]int `json:"served"`
	Latency Latency        `json:"latency"`
}

// Waited counts the requests answered by a render they waited for:
// their own ("miss", "not stored"), or another request's ("collapsed").
func (p PagePurge) Waited() int {
	return p.Served["miss"] + p.Served["collapsed"] + p.Served["not stored"]
}

// pageLabel is the name a reader sees for a page purge approach.
func pageLabel(p PagePurge) string {
	switch p.Approach {
	case PageStampede:
		if p.Near {
			return "stampede middleware + near cache"
		}
		return "stampede middleware"
	case PagePerProcess:
		return "per-process (as Souin, Varnish xkey)"
	}
	return p.Approach
}

// pagePhaseLabel is the name a reader sees for a phase.
func pagePhaseLabel(phase string) string {
	switch phase {
	case "soft":
		return "after SoftPurgeTag"
	case "hard":
		return "after PurgeTag"
	case "every process":
		return "after a purge of every process"
	}
	return phase
}

// purgeTables returns the page purge scenario's tables: every phase, then
// each purge against the per-process one of the same run.
func purgeTables(r *Results) []table {
	if len(r.PagePurge) == 0 {
		return nil
	}
	f := r.PagePurge[0]
	t := table{
		title: "Soft purge of a hot page",
		about: fmt.Sprintf("One page (render %s, ETag, tagged) asked for %.0f times/s across %d processes (open loop: a ticker per process), "+
			"%s per phase; one process purges at the start of each phase after the first. Renders are counted in the handler, "+
			"fleet-wide (\"cond\": conditional, answered 304). \"waited\" counts requests answered by a render they waited for: "+
			"their own (miss, or not stored: given to it alone) or another request's (collapsed); \"slow\" those slower than half the render time. "+
			"Answers: hit · stale · miss · collapsed. A request in flight while a purge was made is in neither phase (\"across\"). "+
			"The per-process row models Souin and Varnish: a page cache in each process, requests coalesced per process, "+
			"the purge sent to every process.",
			ms(f.RenderMs), f.Rate, f.Procs, sec(f.PhaseS)),
		header: []string{"approach", "phase", "renders", "in processes", "waited", "slow", "hit · stale · miss · collapsed",
			"across", "p50", "p99", "p99 ÷ steady", "max", "errors"},
	}
	steady := map[string]float64{}
	for _, p := range r.PagePurge {
		if p.Phase == "steady" {
			steady[p.Approach] = p.Latency.P99
		}
	}
	for _, p := range r.PagePurge {
		renders := fmt.Sprint(p.Renders)
		if p.Conditional > 0 {
			renders += fmt.Sprintf(" (%d cond)", p.Conditional)
		}
		t.rows = append(t.rows, []string{pageLabel(p), pagePhaseLabel(p.Phase), renders, fmt.Sprint(p.RenderProcs),
			fmt.Sprintf("%d of %d", p.Waited(), p.Requests), fmt.Sprint(p.Slow), served(p), fmt.Sprint(p.Across),
			ms(p.Latency.P50), ms(p.Latency.P99), ratio(p.Latency.P99, steady[p.Approach]), ms(p.Latency.Max), errs(p.Errors, p.FirstError)})
	}
	ts := []table{t}

	var base *PagePurge
	for i, p := range r.PagePurge {
		if p.Approach == PagePerProcess && p.Phase != "steady" {
			base = &r.PagePurge[i]
		}
	}
	if base == nil {
		return ts
	}
	vs := table{
		title: "Soft purge of a hot page: against per-process",
		about: "Each purge of the run against the per-process one: the renders it caused, the requests that waited for one, " +
			"and its p99 as a multiple of its own approach's steady p99.",
		header: []string{"purge", "renders", "× per-process", "waited", "× per-process", "p99 ÷ steady"},
	}
	for _, p := range r.PagePurge {
		if p.Phase == "steady" {
			continue
		}
		vs.rows = append(vs.rows, []string{pageLabel(p) + ", " + pagePhaseLabel(p.Phase), fmt.Sprint(p.Renders),
			ratio(float64(p.Renders), float64(base.Renders)), fmt.Sprint(p.Waited()),
			ratio(float64(p.Waited()), float64(base.Waited())), ratio(p.Latency.P99, steady[p.Approach])})
	}
	return append(ts, vs)
}

// served formats the answer counts: hit · stale · miss · collapsed, then
// any other.
func served(p PagePurge) string {
	known := []string{"hit", "stale", "miss", "collapsed"}
	parts := make([]string, 0, len(known))
	for _, k := range known {
		parts = append(parts, fmt.Sprint(p.Served[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(p.Served)) {
		if !slices.Contains(known, k) {
			parts = append(parts, fmt.Sprintf("%s %d", k, p.Served[k]))
		}
	}
	return strings.Join(parts, " · ")
}

// ratio formats a / b, or "-" when b is 0.
func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f×", a/b)
}
