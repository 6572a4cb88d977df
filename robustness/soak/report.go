// This file holds what a worker reports to the coordinator: its counters,
// errors and samples, and the goroutine and heap snapshots taken when its
// traffic is quiet.

package main

import (
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/faultproxy"
)

// snapshot is a process's goroutines and heap at one moment.
type snapshot struct {
	Goroutines int    `json:"goroutines"` // without the fault proxies' own
	Proxy      int    `json:"proxy_goroutines"`
	Heap       uint64 `json:"heap_bytes"` // HeapAlloc after a GC
}

// workerReport is a worker's counters; the coordinator adds them up.
type workerReport struct {
	Requests     int64            `json:"requests"`          // reads: GetOrLoad calls, or Get calls (then GetOrLoad on a miss)
	Gets         int64            `json:"gets"`              // of Requests, those that began with Get
	Loads        int64            `json:"loads"`             // loader calls
	Writes       int64            `json:"writes"`            // database updates whose Delete completed
	LockRuns     int64            `json:"lock_runs"`         // fenced read-modify-writes attempted
	Accepted     map[string]int64 `json:"accepted"`          // accepted increments per counter key
	LateWrites   int64            `json:"late_writes"`       // writes refused: a newer fence had read
	LateReads    int64            `json:"late_reads"`        // reads refused: a newer fence had read
	StaleReads   int64            `json:"stale_reads"`       // GetOrLoad older than a Delete that completed before it began, loaded elsewhere
	StaleSets    int64            `json:"stale_sets"`        // distinct stale values the probe read
	StaleLocal   int64            `json:"stale_reads_local"` // the same, loaded by this process
	WrongValues  int64            `json:"wrong_values"`      // a value for another key, or unreadable
	Excluded     []string         `json:"excluded"`          // keys whose Delete never succeeded
	Errors       map[string]int64 `json:"errors"`            // by kind
	Faults       map[string]int64 `json:"faults"`            // injected, by kind
	Cache        cache.Stats      `json:"cache"`             // of every Cache the worker had
	Near         bool             `json:"near"`              // the worker's caches had the near cache
	Coherence    coherenceReport  `json:"coherence"`         // reads checked against the coherence bound
	HTTP         webReport        `json:"http"`
	Proxy        faultproxy.Stats `json:"proxy"`                  // of both proxies
	Before       snapshot         `json:"before"`                 // before any client, proxy or cache
	Start        snapshot         `json:"start"`                  // after warm-up, traffic stopped, caches open
	End          snapshot         `json:"end"`                    // after the run, traffic stopped, caches open
	Closed       snapshot         `json:"closed"`                 // after closing caches, clients and proxies
	StaleSamples []string         `json:"stale_samples"`          // a few stale reads, for the report
	StartStacks  string           `json:"start_stacks,omitempty"` // goroutines at Start and End, if End has more
	EndStacks    string           `json:"end_stacks,omitempty"`
}

// quiesce waits for the goroutines the traffic left (background writes,
// announcements) to end, and returns a snapshot.
func (w *worker) quiesce() (snapshot, string) {
	last, stacks := snapshotStacks()
	for range 50 { // the goroutine count is the only signal there is
		time.Sleep(100 * time.Millisecond)
		s, st := snapshotStacks()
		if s.Goroutines == last.Goroutines {
			return s, st
		}
		last, stacks = s, st
	}
	return last, stacks
}

func (w *worker) countErr(op string, err error) {
	kind := op + ": " + errKind(err)
	w.mu.Lock()
	w.errs[kind]++
	w.mu.Unlock()
}

func (w *worker) sample(s string) {
	w.mu.Lock()
	if len(w.samples) < 8 {
		w.samples = append(w.samples, s)
	}
	w.mu.Unlock()
}

// report returns the counters so far.
func (w *worker) report() workerReport {
	r := workerReport{
		Requests: w.requests.Load(), Gets: w.gets.Load(), Loads: w.loads.Load(), Writes: w.writes.Load(), LockRuns: w.lockRuns.Load(),
		LateWrites: w.lateWrites.Load(), LateReads: w.lateReads.Load(), StaleReads: w.staleReads.Load(), StaleLocal: w.staleReadsLocal.Load(),
		WrongValues: w.wrongValues.Load(), Accepted: map[string]int64{}, Errors: map[string]int64{}, Faults: map[string]int64{},
	}
	for i := range w.accepted {
		r.Accepted[ctrKey(w.cfg.Prefix, i)] = w.accepted[i].Load()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, v := range w.errs {
		r.Errors[k] = v
	}
	for k, v := range w.faults {
		r.Faults[k] = v
	}
	for k := range w.excluded {
		r.Excluded = append(r.Excluded, k)
	}
	r.StaleSamples = append(r.StaleSamples, w.samples...)
	r.StaleSamples = append(r.StaleSamples, w.violations...)
	r.StaleSets = int64(len(w.staleSets))
	r.Cache = w.c.Stats()
	r.Near = w.cfg.Near
	r.Coherence = w.coh.report()
	r.Coherence.Lost, r.Coherence.Off = w.trackingLost.Load(), w.nearOff.Load()
	r.HTTP = w.web.report()
	r.Proxy = w.proxyStats()
	return r
}
