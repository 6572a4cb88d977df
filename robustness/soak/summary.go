package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/faultproxy"
)

// Growth limits between the start and end snapshots (traffic stopped,
// caches open, after a GC). A leak grows with traffic, so a few minutes
// of thousands of requests a second turn any per-request leak into
// thousands of goroutines or megabytes; the slack only absorbs what
// legitimately differs between two quiet moments: a pool goroutine
// retrying a dial, a subscription reconnecting, runtime and GC workers
// (goroutines: +10), and allocator fragmentation, pooled buffers and maps
// that keep their largest size (heap: the larger of 2x and +8 MiB, which
// also covers the proxies' 16 KiB buffers for the connections the pools
// happen to keep).
const (
	goroutineSlack = 10
	heapSlack      = 8 << 20
)

// summary is what a soak run found; it is also the JSON written by -json.
type summary struct {
	Command     string    `json:"command"`
	Server      string    `json:"server"`
	Addr        string    `json:"addr"`
	Seed        uint64    `json:"seed"`
	Workers     int       `json:"workers"`
	Keys        int       `json:"keys"`
	Counters    int       `json:"counters"`
	Readers     int       `json:"readers_per_worker"`
	Writers     int       `json:"writers_per_worker"`
	Lockers     int       `json:"lockers_per_worker"`
	HTTPClients int       `json:"http_clients_per_worker"`
	NearWorkers int       `json:"near_workers"` // workers whose caches had the near cache
	NearEntries int       `json:"near_max_entries"`
	NearLease   string    `json:"near_lease"`
	Bound       string    `json:"coherence_bound"` // near lease + margin
	Warmup      string    `json:"warmup"`
	Duration    string    `json:"duration"`
	Started     time.Time `json:"started"`
	Elapsed     string    `json:"elapsed"`

	Requests int64 `json:"requests"` // reads: GetOrLoad calls, or Get calls (then GetOrLoad on a miss)
	Gets     int64 `json:"gets"`     // of Requests, those that began with Get
	Loads    int64 `json:"loads"`    // loader calls
	Writes   int64 `json:"writes"`   // database updates followed by a completed Delete
	LockRuns int64 `json:"lock_runs"`

	// HTTP through the middleware.
	HTTPRequests  int64            `json:"http_requests"`
	HTTPRenders   int64            `json:"http_renders"`                 // handler calls, background refreshes included
	XCache        map[string]int64 `json:"http_x_cache"`                 // replies by X-Cache
	HTTPElsewhere int64            `json:"http_hits_rendered_elsewhere"` // HIT or STALE replies another worker rendered
	HTTPCache     cache.Stats      `json:"http_cache"`                   // the middleware's Caches

	// Invariants.
	LostUpdates     int64 `json:"lost_updates"`      // accepted increments missing from the counters
	PhantomUpdates  int64 `json:"phantom_updates"`   // counter increments nobody had accepted
	StaleSets       int64 `json:"stale_sets"`        // StaleSetsRead + StaleSetsAudit + StaleSetsAtEnd
	StaleSetsRead   int64 `json:"stale_sets_read"`   // distinct stale values the workers' GETs read
	StaleSetsAudit  int64 `json:"stale_sets_audit"`  // distinct stale values the audits found
	StaleSetsAtEnd  int64 `json:"stale_sets_at_end"` // keys whose cached value differs from the database at the end
	WrongValues     int64 `json:"wrong_values"`      // values returned or stored for another key
	WrongResponses  int64 `json:"wrong_responses"`   // HTTP replies for another page or user, or cached when they must not be
	Audits          int64 `json:"audits"`            // audit rounds over every key
	AuditErrors     int64 `json:"audit_errors"`
	ExcludedKeys    int   `json:"excluded_keys"`        // keys whose Delete never succeeded
	AcceptedUpdates int64 `json:"accepted_updates"`     // fenced increments accepted
	CounterTotal    int64 `json:"counter_total"`        // sum of the counters
	LateWrites      int64 `json:"rejected_late_writes"` // fenced writes refused: a newer holder had read
	LateReads       int64 `json:"rejected_late_reads"`  // fenced reads refused: a newer holder had read

	// Read-your-writes: a GetOrLoad that began after this process's
	// Delete completed and still returned an older version, without the
	// cache holding it (the audits would count that as a stale set), e.g.
	// by joining a load that was already running in the process, or by
	// taking the value from an announcement sent before the Delete.
	StaleReads      int64 `json:"stale_reads"`       // the value was loaded by another process
	StaleReadsLocal int64 `json:"stale_reads_local"` // loaded by this process: a join of its running load

	// Coherence: reads (GetOrLoad or Get) that returned a version some worker's
	// completed Delete had superseded before they began (see
	// coherence.go), in the near workers and in the others. Within the
	// bound they are legitimate (invalidations take time to arrive);
	// beyond it they are violations, except reads the near cache did not
	// answer made while failing open (FailOpen; GetOrLoad promises
	// nothing about other processes' Deletes then).
	CoherenceNear   coherenceReport `json:"coherence_near"`
	CoherenceOther  coherenceReport `json:"coherence_other"`
	BoundViolations int64           `json:"bound_violations"` // in all workers
	NearCache       cache.Stats     `json:"near_cache"`       // the near workers' value Caches

	Errors map[string]int64 `json:"errors"`
	Faults map[string]int64 `json:"faults"`
	Cache  cache.Stats      `json:"cache"`
	Proxy  faultproxy.Stats `json:"proxy"`
	Memory []memory         `json:"memory"`

	Samples  []string `json:"samples,omitempty"`
	Failures []string `json:"failures"`
	OK       bool     `json:"ok"`
}

// memory is one worker's goroutines and heap.
type memory struct {
	Worker      string   `json:"worker"`
	Before      snapshot `json:"before"`
	Start       snapshot `json:"start"`
	End         snapshot `json:"end"`
	Closed      snapshot `json:"closed"`
	StartStacks string   `json:"start_stacks,omitempty"` // if End has more goroutines than Start
	EndStacks   string   `json:"end_stacks,omitempty"`
}

// fill adds up the workers' reports and checks the invariants.
func (s *summary) fill(reports []workerReport, starts []snapshot, counters map[string]int64, a *auditor,
	atEnd int64, endSamples []string, excluded int) {
	accepted := map[string]int64{}
	for i, r := range reports {
		s.Requests += r.Requests
		s.Gets += r.Gets
		s.Loads += r.Loads
		s.Writes += r.Writes
		s.LockRuns += r.LockRuns
		s.LateWrites += r.LateWrites
		s.LateReads += r.LateReads
		s.StaleReads += r.StaleReads
		s.StaleReadsLocal += r.StaleLocal
		s.StaleSetsRead += r.StaleSets
		s.WrongValues += r.WrongValues
		s.HTTPRequests += r.HTTP.Requests
		s.HTTPRenders += r.HTTP.Renders
		s.HTTPElsewhere += r.HTTP.Elsewhere
		s.WrongResponses += r.HTTP.Wrong
		for k, v := range r.HTTP.XCache {
			s.XCache[k] += v
		}
		s.HTTPCache = s.HTTPCache.Add(r.HTTP.Cache)
		for k, v := range r.Accepted {
			accepted[k] += v
		}
		for k, v := range r.Errors {
			s.Errors[k] += v
		}
		for k, v := range r.Faults {
			s.Faults[k] += v
		}
		s.Cache = s.Cache.Add(r.Cache)
		if r.Near {
			s.NearCache = s.NearCache.Add(r.Cache)
			s.CoherenceNear = s.CoherenceNear.add(r.Coherence)
		} else {
			s.CoherenceOther = s.CoherenceOther.add(r.Coherence)
		}
		s.Proxy.Accepted += r.Proxy.Accepted
		s.Proxy.Refused += r.Proxy.Refused
		s.Proxy.Dropped += r.Proxy.Dropped
		s.Proxy.Reset += r.Proxy.Reset
		s.Proxy.Spikes += r.Proxy.Spikes
		s.Proxy.Chunks += r.Proxy.Chunks
		s.Samples = append(s.Samples, r.StaleSamples...)
		s.Memory = append(s.Memory, memory{Worker: fmt.Sprintf("w%d", i), Before: r.Before, Start: starts[i], End: r.End, Closed: r.Closed,
			StartStacks: r.StartStacks, EndStacks: r.EndStacks})
	}
	for k, want := range accepted {
		got := counters[k]
		s.AcceptedUpdates += want
		s.CounterTotal += got
		if want > got {
			s.LostUpdates += want - got
		} else {
			s.PhantomUpdates += got - want
		}
	}
	a.mu.Lock()
	s.StaleSetsAudit = int64(len(a.stale))
	s.WrongValues += a.wrong
	s.Audits, s.AuditErrors = a.rounds, a.errs
	s.Samples = append(s.Samples, a.samples...)
	a.mu.Unlock()
	s.StaleSetsAtEnd = atEnd
	s.StaleSets = s.StaleSetsRead + s.StaleSetsAudit + s.StaleSetsAtEnd
	s.Samples = append(s.Samples, endSamples...)
	s.ExcludedKeys = excluded

	fail := func(format string, args ...any) { s.Failures = append(s.Failures, fmt.Sprintf(format, args...)) }
	if s.LostUpdates != 0 {
		fail("lost updates: %d", s.LostUpdates)
	}
	if s.PhantomUpdates != 0 {
		fail("counter increments nobody accepted: %d", s.PhantomUpdates)
	}
	if s.StaleSets != 0 {
		fail("stale sets: %d (%d read by workers, %d by the audits, %d at the end)", s.StaleSets, s.StaleSetsRead, s.StaleSetsAudit, s.StaleSetsAtEnd)
	}
	if s.WrongValues != 0 {
		fail("values for the wrong key: %d", s.WrongValues)
	}
	if s.WrongResponses != 0 {
		fail("wrong HTTP responses: %d", s.WrongResponses)
	}
	if n := s.StaleReads + s.StaleReadsLocal; n != 0 {
		fail("stale reads after the reader's own Delete: %d (%d loaded here, %d elsewhere)", n, s.StaleReadsLocal, s.StaleReads)
	}
	s.BoundViolations = s.CoherenceNear.Violations + s.CoherenceOther.Violations
	if s.BoundViolations != 0 {
		fail("reads older than the coherence bound (%s): %d (%d in near workers, %d in the others)",
			s.Bound, s.BoundViolations, s.CoherenceNear.Violations, s.CoherenceOther.Violations)
	}
	if s.NearWorkers > 0 && s.NearCache.NearHits == 0 && s.CoherenceNear.Off == 0 {
		fail("the near cache answered no read in %d near workers (and the server did not refuse tracking)", s.NearWorkers)
	}
	if s.Requests == 0 || s.Loads == 0 {
		fail("no traffic: %d requests, %d loads", s.Requests, s.Loads)
	}
	if s.HTTPClients > 0 && (s.HTTPRequests == 0 || s.HTTPRenders == 0) {
		fail("no HTTP traffic: %d requests, %d renders", s.HTTPRequests, s.HTTPRenders)
	}
	if s.Audits == 0 {
		fail("no audit completed")
	}
	for _, m := range s.Memory {
		if d := m.End.Goroutines - m.Start.Goroutines; d > goroutineSlack {
			fail("%s: goroutines grew by %d during the run (%d -> %d)", m.Worker, d, m.Start.Goroutines, m.End.Goroutines)
		}
		if limit := max(2*m.Start.Heap, m.Start.Heap+heapSlack); m.End.Heap > limit {
			fail("%s: heap grew from %s to %s during the run", m.Worker, mib(m.Start.Heap), mib(m.End.Heap))
		}
		if d := m.Closed.Goroutines - m.Before.Goroutines; d > goroutineSlack {
			fail("%s: %d more goroutines after closing everything than before opening it (%d -> %d)", m.Worker, d, m.Before.Goroutines, m.Closed.Goroutines)
		}
	}
	s.OK = len(s.Failures) == 0
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// progressLine prints one line of running totals.
func progressLine(w io.Writer, elapsed time.Duration, reports []workerReport, staleSets int64) {
	var req, loads, writes, locks, errs, faults, staleReads, late, httpReq, wrong, violations int64
	var nearHits uint64
	for _, r := range reports {
		nearHits += r.Cache.NearHits + r.HTTP.Cache.NearHits
		violations += r.Coherence.Violations
		req += r.Requests
		httpReq += r.HTTP.Requests
		wrong += r.HTTP.Wrong
		loads += r.Loads
		writes += r.Writes
		locks += r.LockRuns
		staleReads += r.StaleReads + r.StaleLocal
		staleSets += r.StaleSets
		late += r.LateWrites
		for _, v := range r.Errors {
			errs += v
		}
		for _, v := range r.Faults {
			faults += v
		}
	}
	fmt.Fprintf(w, "soak %5s  requests %d (%.0f/s)  loads %d  writes %d  lock runs %d  late writes refused %d  http %d  errors %d  faults %d  stale sets %d  stale reads %d  wrong responses %d  near hits %d  reads older than the bound %d\n",
		elapsed.Round(time.Second), req, float64(req)/elapsed.Seconds(), loads, writes, locks, late, httpReq, errs, faults, staleSets, staleReads, wrong, nearHits, violations)
}

// writeTable prints the summary.
func writeTable(w io.Writer, s *summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "  %s\t%v\n", k, v) }
	check := func(k string, v int64) {
		mark := "ok"
		if v != 0 {
			mark = "FAIL"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", k, v, mark)
	}
	fmt.Fprintf(tw, "soak summary: %s, %d workers, %d keys, seed %d, run %s after %s warm-up (elapsed %s)\n",
		s.Server, s.Workers, s.Keys, s.Seed, s.Duration, s.Warmup, s.Elapsed)
	fmt.Fprintln(tw, "traffic")
	row("reads (GetOrLoad, or Get then GetOrLoad on a miss)", fmt.Sprintf("%d (%d began with Get)", s.Requests, s.Gets))
	row("loads (loader calls)", s.Loads)
	row("cache hits / stale hits / misses", fmt.Sprintf("%d / %d / %d", s.Cache.Hits, s.Cache.StaleHits, s.Cache.Misses))
	row("coalesced / waits / wait timeouts", fmt.Sprintf("%d / %d / %d", s.Cache.Coalesced, s.Cache.Waits, s.Cache.WaitTimeouts))
	row("fail-open loads / refreshes / writes skipped", fmt.Sprintf("%d / %d / %d", s.Cache.FailOpenLoads, s.Cache.Refreshes, s.Cache.WritesSkipped))
	row("database updates (Delete completed)", s.Writes)
	row("fenced lock runs / accepted", fmt.Sprintf("%d / %d", s.LockRuns, s.AcceptedUpdates))
	row("late holders refused (read / write)", fmt.Sprintf("%d / %d", s.LateReads, s.LateWrites))
	row("HTTP requests / renders", fmt.Sprintf("%d / %d", s.HTTPRequests, s.HTTPRenders))
	row("HTTP X-Cache HIT / STALE / MISS / BYPASS / none", fmt.Sprintf("%d / %d / %d / %d / %d",
		s.XCache["HIT"], s.XCache["STALE"], s.XCache["MISS"], s.XCache["BYPASS"], s.XCache["(none)"]))
	row("HTTP hits rendered by another worker", s.HTTPElsewhere)
	row("HTTP cache: fail-open loads / wait timeouts", fmt.Sprintf("%d / %d", s.HTTPCache.FailOpenLoads, s.HTTPCache.WaitTimeouts))
	fmt.Fprintf(tw, "near cache (%d of %d workers, MaxEntries %d, Lease %s)\n", s.NearWorkers, s.Workers, s.NearEntries, s.NearLease)
	row("value cache hits+stale hits / from the near cache", fmt.Sprintf("%d / %d", s.NearCache.Hits+s.NearCache.StaleHits, s.NearCache.NearHits))
	row("HTTP cache hits+stale hits / from the near cache", fmt.Sprintf("%d / %d", s.HTTPCache.Hits+s.HTTPCache.StaleHits, s.HTTPCache.NearHits))
	row("invalidations / flushes (both caches)", fmt.Sprintf("%d / %d", s.NearCache.NearInvalidations+s.HTTPCache.NearInvalidations, s.NearCache.NearFlushes+s.HTTPCache.NearFlushes))
	row("tracking connections lost (logged) / refused", fmt.Sprintf("%d / %d", s.CoherenceNear.Lost, s.CoherenceNear.Off))
	fmt.Fprintln(tw, "invariants")
	check("lost updates", s.LostUpdates)
	check("phantom updates", s.PhantomUpdates)
	check("stale sets (workers' GETs)", s.StaleSetsRead)
	check("stale sets (audits)", s.StaleSetsAudit)
	check("stale sets (end, cache vs database)", s.StaleSetsAtEnd)
	check("values for the wrong key", s.WrongValues)
	check("wrong HTTP responses", s.WrongResponses)
	row("audit rounds (errors)", fmt.Sprintf("%d (%d)", s.Audits, s.AuditErrors))
	row("keys excluded (Delete never succeeded)", s.ExcludedKeys)
	check("stale reads after own Delete, loaded here", s.StaleReadsLocal)
	check("stale reads after own Delete, loaded elsewhere", s.StaleReads)
	check("reads older than the bound "+s.Bound+", near workers", s.CoherenceNear.Violations)
	check("reads older than the bound "+s.Bound+", other workers", s.CoherenceOther.Violations)
	row("the same while failing open, not from the near cache (excused)", fmt.Sprintf("%d / %d (near / other workers)", s.CoherenceNear.FailOpen, s.CoherenceOther.FailOpen))
	row("the same from the near cache, within the Lease overrun a stall of the process allows (excused)", fmt.Sprintf("%d", s.CoherenceNear.Starved))
	for _, c := range []struct {
		name string
		r    coherenceReport
	}{{"near workers", s.CoherenceNear}, {"other workers", s.CoherenceOther}} {
		row("reads of a superseded version within the bound, "+c.name, fmt.Sprintf("%d of %d checked (age <=1ms %s; max %v; check errors %d)",
			c.r.superseded(), c.r.Checked, ageHistogram(c.r), time.Duration(c.r.MaxAge).Round(time.Microsecond), c.r.Errors))
	}
	fmt.Fprintln(tw, "faults injected")
	for _, k := range slices.Sorted(maps.Keys(s.Faults)) {
		row(k, s.Faults[k])
	}
	row("proxy: conns / reset / dropped / spiked chunks", fmt.Sprintf("%d / %d / %d / %d", s.Proxy.Accepted, s.Proxy.Reset, s.Proxy.Dropped, s.Proxy.Spikes))
	fmt.Fprintln(tw, "errors by kind (expected under faults)")
	for _, k := range slices.Sorted(maps.Keys(s.Errors)) {
		row(k, s.Errors[k])
	}
	fmt.Fprintln(tw, "goroutines and heap (start: after warm-up; end: after the run; both quiet, caches open)")
	for _, m := range s.Memory {
		row(m.Worker, fmt.Sprintf("goroutines %d -> %d (+%d proxy -> +%d), heap %s -> %s; before opening %d, after closing %d",
			m.Start.Goroutines, m.End.Goroutines, m.Start.Proxy, m.End.Proxy, mib(m.Start.Heap), mib(m.End.Heap),
			m.Before.Goroutines, m.Closed.Goroutines))
	}
	if len(s.Samples) > 0 {
		fmt.Fprintln(tw, "samples")
		for _, x := range s.Samples {
			fmt.Fprintf(tw, "  %s\n", x)
		}
	}
	if s.OK {
		fmt.Fprintln(tw, "result: OK")
	} else {
		fmt.Fprintf(tw, "result: FAILED: %s\n", strings.Join(s.Failures, "; "))
	}
	_ = tw.Flush()
}

// ageHistogram renders a coherence report's buckets after the first:
// "/ <=5ms n / ...".
func ageHistogram(r coherenceReport) string {
	var b strings.Builder
	if len(r.Superseded) == 0 {
		return "0"
	}
	fmt.Fprintf(&b, "%d", r.Superseded[0])
	for i, n := range r.Superseded[1:] {
		label := "bound"
		if i+1 < len(ageBuckets) {
			label = ageBuckets[i+1].String()
		}
		fmt.Fprintf(&b, ", <=%s %d", label, n)
	}
	return b.String()
}
