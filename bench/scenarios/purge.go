package scenarios

import (
	"context"
	"fmt"
	"time"

	"github.com/hotkv/stampede/bench/report"
)

// PagePurge is issue 40's proof for pages: one hot page, asked for
// PageRate times a second across Procs processes (open loop: a ticker per
// process starts each request in a goroutine of its own, so that a slow
// answer does not lower the offered load), in phases of PagePhase:
//
//   - stampede's middleware over one cache on the server (with the near
//     cache where the server tracks keys), the page tagged "hot" (a
//     Surrogate-Key field) with an ETag: steady, then after SoftPurgeTag,
//     then after PurgeTag, each called by pod 0 at the start of its phase;
//   - the per-process model (baselines.PageCache, as Souin and Varnish
//     keep pages: in each process, requests coalesced per process): steady,
//     then after a purge told to every process (pod 0 publishes it, every
//     process drops its copy when told).
//
// The handler counts its renders (conditional or not: a request with
// If-None-Match answered 304) with the instant each began; a render, and a
// request (by its tick), belongs to the phase it began in. Phases begin
// when pod 0 began the purge call.
func PagePurge(ctx context.Context, e *Env, r *report.Results) error {
	near := e.NearWorks(ctx)
	if !near {
		e.noteNoNear(&r.Notes)
	}
	for _, p := range pagePlans() {
		rows, err := pagePurgeRun(ctx, e, p, near)
		if err != nil {
			return fmt.Errorf("%s: %w", p.approach, err)
		}
		r.PagePurge = append(r.PagePurge, rows...)
	}
	return nil
}

// pagePlan is one approach's run: the phases after the steady one, each
// with the purge that begins it and the label it is reported under.
type pagePlan struct {
	approach string
	purges   []pagePurgeStep
}

// pagePurgeStep is a purge pod 0 makes: Purge is what it calls ("soft":
// SoftPurgeTag, "hard": PurgeTag, "every process": the per-process
// model's purge), Label the phase it begins as reported.
type pagePurgeStep struct{ Label, Purge string }

// pagePlans returns the runs of the page purge scenario, in order.
func pagePlans() []pagePlan {
	return []pagePlan{
		{approach: report.PageStampede, purges: []pagePurgeStep{{"soft", "soft"}, {"hard", "hard"}}},
		{approach: report.PagePerProcess, purges: []pagePurgeStep{{"every process", "every process"}}},
	}
}

// pagePurgeRun runs plan on e's pods and sums it up by phase.
func pagePurgeRun(ctx context.Context, e *Env, plan pagePlan, near bool) ([]report.PagePurge, error) {
	c := e.Cfg
	phases := len(plan.purges) + 1
	duration := time.Duration(phases) * c.PagePhase
	e.Progress.Step(fmt.Sprintf("page purge · %s · %d phases", plan.approach, phases), duration)
	perPod := c.PageRate / float64(c.Procs)
	interval := time.Duration(float64(time.Second) / perPod)
	ns := e.key("page", plan.approach)
	jobs := make([]job, c.Procs)
	for i := range jobs {
		jobs[i] = job{Kind: "page", Approach: plan.approach, NS: ns, Rate: perPod, Load: c.PageRender,
			PhaseShift: interval * time.Duration(i) / time.Duration(c.Procs), Duration: duration,
			Phase: c.PagePhase, Near: near && plan.approach == report.PageStampede}
		for _, p := range plan.purges {
			jobs[i].Purges = append(jobs[i].Purges, p.Purge)
		}
	}
	res, _, err := e.Pods.Run(ctx, jobs, duration+2*time.Minute)
	if err != nil {
		return nil, err
	}
	rows, err := pageSummary(plan, res, c)
	for i := range rows {
		rows[i].Near = jobs[0].Near
	}
	return rows, err
}

// pageSummary sums up one run's requests and renders by phase. Pod 0's
// result says when each purge call began and returned. A render belongs
// to the phase it began in (a purge's began after the purge's call did).
// A request, from its tick to its answer, belongs to the phase it lay
// wholly within: it ended before the next purge call began and began
// after the last one returned; one in flight during a purge call (it may
// have found the page before or after the purge) is counted apart, in
// the later phase's Across, and in none of its figures.
func pageSummary(plan pagePlan, res []podResult, c Config) ([]report.PagePurge, error) {
	switch {
	case len(res) == 0:
		return nil, fmt.Errorf("page purge: no pods")
	case len(res[0].Purges) != len(plan.purges):
		return nil, fmt.Errorf("page purge: pod 0 made %d purges, want %d", len(res[0].Purges), len(plan.purges))
	}
	purges := res[0].Purges // µs since the start: [began, returned]
	// phaseOf returns the phase of a request from began to ended, or -1
	// and the purge it straddles, or of a render (began = ended).
	phaseOf := func(began, ended int64) (phase, across int) {
		k := 0
		for k < len(purges) && began >= purges[k][0] {
			k++
		}
		// k: the purges that began at or before began.
		if k > 0 && began < purges[k-1][1] {
			return -1, k
		}
		if k < len(purges) && ended >= purges[k][0] {
			return -1, k + 1
		}
		return k, 0
	}
	rows := make([]report.PagePurge, len(purges)+1)
	lats := make([][]int64, len(rows))
	procs := make([]map[int]bool, len(rows))
	for k := range rows {
		rows[k] = report.PagePurge{Approach: plan.approach, Phase: "steady", Procs: len(res), Rate: c.PageRate,
			PhaseS: c.PagePhase.Seconds(), RenderMs: millis(c.PageRender), Served: map[string]int{}, AcrossServed: map[string]int{}}
		if k > 0 {
			rows[k].Phase = plan.purges[k-1].Label
		}
		procs[k] = map[int]bool{}
	}
	slow := c.PageRender.Microseconds() / 2
	for pod, r := range res {
		if len(r.At) != len(r.Lat) || len(r.Served) != len(r.Lat) {
			return nil, fmt.Errorf("page purge: pod %d reported %d requests, %d starts, %d answers", pod, len(r.Lat), len(r.At), len(r.Served))
		}
		for i, lat := range r.Lat {
			k, across := phaseOf(r.At[i], r.At[i]+lat)
			if k < 0 {
				rows[across].Across++
				rows[across].AcrossServed[r.Served[i]]++
				continue
			}
			p := &rows[k]
			p.Requests++
			p.Served[r.Served[i]]++
			if r.Served[i] == "error" {
				p.Errors++
			}
			if lat > slow {
				p.Slow++
			}
			lats[k] = append(lats[k], lat)
		}
		for k := range rows {
			if rows[k].Errors > 0 && rows[k].FirstError == "" {
				rows[k].FirstError = r.FirstErr
			}
		}
		for _, rd := range r.Renders {
			k := 0
			for k < len(purges) && rd.At >= purges[k][0] {
				k++
			}
			rows[k].Renders++
			if rd.Cond {
				rows[k].Conditional++
			}
			procs[k][pod] = true
		}
	}
	for k := range rows {
		rows[k].Latency = summarize(lats[k])
		rows[k].RenderProcs = len(procs[k])
	}
	return rows, nil
}

// CheckPagePurge returns what in rows (one approach's phases, as the
// scenario reports them for a run of procs processes) contradicts what
// the page purge scenario shows, structurally (counts, no times): no
// render and no error while steady; after a soft purge exactly one render
// in the fleet, conditional (in the background: no request rendered),
// and some requests served stale; after a hard purge one render in the
// fleet, not conditional, besides those the middleware refused to store,
// each answered to its own request alone; after the per-process purge one
// render in each of procs processes.
func CheckPagePurge(rows []report.PagePurge, procs int) []string {
	var bad []string
	for _, p := range rows {
		at := fmt.Sprintf("%s, %s", p.Approach, p.Phase)
		if p.Errors > 0 || p.Requests == 0 {
			bad = append(bad, fmt.Sprintf("%s: %d requests, %d errors (%s)", at, p.Requests, p.Errors, p.FirstError))
		}
		switch p.Phase {
		case "steady":
			if p.Renders != 0 || p.Waited() != 0 {
				bad = append(bad, fmt.Sprintf("%s: %d renders, %d answers from a render; want none", at, p.Renders, p.Waited()))
			}
		case "soft":
			if p.Renders != 1 || p.Conditional != 1 {
				bad = append(bad, fmt.Sprintf("%s: %d renders, %d conditional; want exactly 1, conditional", at, p.Renders, p.Conditional))
			}
			// The refresh was begun by a request served stale, maybe one
			// in flight during the purge call. No request rendered. A
			// request whose look found the page stale and whose
			// GetOrLoad then found it revalidated is labelled collapsed
			// (fwd=uri-miss) by the middleware, though it waited for
			// nothing (a stale page is answered at once): collapsed
			// answers are not counted against the soft purge here.
			stale := p.Served["stale"] + p.AcrossServed["stale"]
			if own := p.Served["miss"] + p.Served["not stored"]; own != 0 || stale == 0 {
				bad = append(bad, fmt.Sprintf("%s: %d answered by a render of their own, %d stale; want none, and some stale", at, own, stale))
			}
		case "hard":
			// One render, stored: the request that finds the purged
			// page renders it again in its place, knowing the epochs
			// after the purge (middleware: replacePurged).
			refused := p.Served["not stored"] + p.AcrossServed["not stored"]
			if p.Renders != 1 || refused != 0 || p.Conditional != 0 {
				bad = append(bad, fmt.Sprintf("%s: %d renders (%d not stored), %d conditional; want exactly 1, stored, not conditional", at, p.Renders, refused, p.Conditional))
			}
		case "every process":
			if p.Renders != procs || p.RenderProcs != procs {
				bad = append(bad, fmt.Sprintf("%s: %d renders in %d processes; want one in each of %d", at, p.Renders, p.RenderProcs, procs))
			}
		}
	}
	return bad
}
