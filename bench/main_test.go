package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/bench/report"
	"github.com/hotkv/stampede/bench/scenarios"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// TestMain also serves as the pods' entry point: the bench starts its own
// binary again as worker processes, and under go test that binary is this
// test binary.
func TestMain(m *testing.M) {
	if scenarios.IsPod() {
		os.Exit(scenarios.PodMain())
	}
	redistest.Main(m, nil)
}

// TestRun_quick runs the whole bench in quick mode, with real worker
// processes, on the embedded server and on Redis 8, and checks that the
// report is complete and that the numbers say what the bench is for.
func TestRun_quick(t *testing.T) {
	tests := []struct {
		name string
		url  func(t *testing.T) string
		near bool // the server tracks keys: the near cache works
	}{
		{"embedded", func(*testing.T) string { return "" }, false},
		{"redis8", func(t *testing.T) string { return "redis://" + redistest.Shared(t, redistest.Redis8).Addrs()[0] }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := tt.url(t)
			out := t.TempDir()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			var stdout, stderr bytes.Buffer
			start := time.Now()
			if err := run(ctx, []string{"-quick", "-redis", url, "-out", out}, &stdout, &stderr); err != nil {
				t.Fatalf("run: %v\nstderr:\n%s", err, stderr.String())
			}
			t.Logf("quick run took %v", time.Since(start).Round(time.Millisecond))

			files := []string{"report.md", "results.json", "hot-latency.png", "loader-calls.png", "scaling.png"}
			if tt.near {
				files = append(files, "coherence.png")
			}
			for _, f := range files {
				b, err := os.ReadFile(filepath.Join(out, f))
				switch {
				case err != nil:
					t.Errorf("%s: %v", f, err)
				case len(b) < 100:
					t.Errorf("%s has only %d bytes", f, len(b))
				case strings.HasSuffix(f, ".png") && !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
					t.Errorf("%s is not a PNG", f)
				}
			}
			md, _ := os.ReadFile(filepath.Join(out, "report.md"))
			for _, want := range []string{"## Cold stampede", "## Hot-key expiry", "## Hit path", "## Lock", "## Large values",
				"## Scaling with processes", "## Scaling with distinct keys", "![Hot-key expiry](hot-latency.png)",
				"## Near cache: hit path", "## Near cache: coherence across processes", "## Near cache: memory",
				"## Cold gap", "## Lock gap", "## Soft purge of a hot page"} {
				if !bytes.Contains(md, []byte(want)) {
					t.Errorf("report.md lacks %q", want)
				}
			}
			if !strings.Contains(stdout.String(), "stampede GetOrLoad") {
				t.Errorf("no table on stdout:\n%s", stdout.String())
			}
			r, err := report.ReadJSON(out)
			if err != nil {
				t.Fatal(err)
			}
			checkResults(t, r)
			checkNear(t, r, tt.near)
			if t.Failed() {
				t.Logf("tables:\n%s", stdout.String())
			}
		})
	}
}

// checkResults checks what the bench claims: one load where stampede
// coordinates, more where nothing does, and no errors anywhere.
func checkResults(t *testing.T, r *report.Results) {
	t.Helper()
	cold := map[string]report.Cold{}
	for _, c := range r.Cold {
		cold[c.Approach] = c
		if c.Errors > 0 || c.Requests != c.Procs*c.Goroutines {
			t.Errorf("cold %s: %d of %d requests failed (%s); want %d requests, no errors",
				c.Approach, c.Errors, c.Requests, c.FirstError, c.Procs*c.Goroutines)
		}
	}
	if n := len(scenarios.Approaches()); len(cold) != n && len(cold) != n+1 {
		t.Fatalf("cold stampede has %d approaches, want %d, or %d with the near cache", len(cold), n, n+1)
	}
	if n := cold["stampede"].LoaderCalls; n != 1 {
		t.Errorf("cold stampede: stampede called the loader %d times, want 1", n)
	}
	if n := cold["lock-poll"].LoaderCalls; n != 1 {
		t.Errorf("cold stampede: lock-poll called the loader %d times, want 1", n)
	}
	if n := cold["naive"].LoaderCalls; n <= 1 {
		t.Errorf("cold stampede: naive called the loader %d times, want more than 1", n)
	}
	if n, procs := cold["singleflight"].LoaderCalls, int64(cold["singleflight"].Procs); n < 1 || n > procs {
		t.Errorf("cold stampede: singleflight called the loader %d times, want 1 to %d (one per process at most)", n, procs)
	}

	checkGaps(t, r)

	for _, h := range r.Hot {
		if h.Errors > 0 || h.Requests == 0 {
			t.Errorf("hot %s: %d of %d requests failed (%s)", h.Approach, h.Errors, h.Requests, h.FirstError)
		}
		if h.Expiries < 2 {
			t.Errorf("hot %s: %d expiries, want at least 2", h.Approach, h.Expiries)
		}
		if strings.HasPrefix(h.Approach, "stampede") && (h.LoadsPerExpiry != 1 || h.MaxLoadsPerExpiry != 1) {
			t.Errorf("hot %s: %.2f loads per expiry (max %d), want exactly 1", h.Approach, h.LoadsPerExpiry, h.MaxLoadsPerExpiry)
		}
	}
	if n := len(scenarios.Approaches()); len(r.Hot) != len(cold) {
		t.Errorf("hot-key expiry has %d approaches, want %d as in the cold stampede (%d, or %d with the near cache)", len(r.Hot), len(cold), n, n+1)
	}

	for _, h := range r.Hit {
		if h.Errors > 0 || h.Ops == 0 {
			t.Errorf("hit %s: %d errors (%s) in %d ops", h.Mode, h.Errors, h.FirstError, h.Ops)
		}
	}
	ran := 0
	for _, l := range r.Lock {
		if l.Skipped != "" {
			continue
		}
		ran++
		if l.Errors > 0 || l.Cycles == 0 {
			t.Errorf("lock %s: %d errors (%s) in %d cycles", l.Strategy, l.Errors, l.FirstError, l.Cycles)
		}
	}
	if ran == 0 {
		t.Error("lock: no strategy ran")
	}
	for _, l := range r.Large {
		if l.Skipped == "" && (l.Errors > 0 || l.BytesSent <= 0) {
			t.Errorf("large %d %s: %d errors (%s), %.0f bytes sent", l.Size, l.Method, l.Errors, l.FirstError, l.BytesSent)
		}
		if l.Skipped == "" && strings.Contains(l.Method, "digest") && l.BytesSent > 1024 {
			t.Errorf("large %d %s: %.0f bytes sent for a digest", l.Size, l.Method, l.BytesSent)
		}
	}
	pages := map[string][]report.PagePurge{}
	for _, p := range r.PagePurge {
		pages[p.Approach] = append(pages[p.Approach], p)
	}
	if len(pages[report.PageStampede]) != 3 || len(pages[report.PagePerProcess]) != 2 {
		t.Errorf("page purge: %d stampede phases and %d per-process ones, want 3 and 2", len(pages[report.PageStampede]), len(pages[report.PagePerProcess]))
	}
	for _, rows := range pages {
		for _, bad := range scenarios.CheckPagePurge(rows, r.Config.Procs) {
			t.Error("page purge: " + bad)
		}
	}
	for _, s := range append(append([]report.Scale(nil), r.ScaleProcs...), r.ScaleKeys...) {
		if s.Errors > 0 {
			t.Errorf("scaling %s=%d %s: %d errors (%s)", s.Axis, s.X, s.Approach, s.Errors, s.FirstError)
		}
		if (s.Approach == "stampede" || s.Approach == "lock-poll") && s.LoaderCalls != int64(s.Keys) {
			t.Errorf("scaling %s=%d %s: %d loader calls for %d keys, want one per key", s.Axis, s.X, s.Approach, s.LoaderCalls, s.Keys)
		}
	}
}

// checkNear checks the near cache's rows and scenarios: with a server
// that tracks keys, one load per cold stampede and per expiry, hits
// answered from the near cache, every coherence write seen by the other
// process, and a flood that leaves the heap near what the bound allows;
// without one, everything near skipped with a note.
func checkNear(t *testing.T, r *report.Results, near bool) {
	t.Helper()
	var cold []report.Cold
	for _, c := range r.Cold {
		if c.Approach == "stampede-near" {
			cold = append(cold, c)
		}
	}
	var hot []report.Hot
	for _, h := range r.Hot {
		if h.Approach == "stampede-near" {
			hot = append(hot, h)
		}
	}
	if !near {
		if len(cold) > 0 || len(hot) > 0 || len(r.NearHit) != 3 {
			t.Errorf("no near cache: %d cold and %d hot near rows, %d near hit rows; want 0, 0 and 3 (raw, stampede, otter)", len(cold), len(hot), len(r.NearHit))
		}
		if r.Coherence == nil || r.Coherence.Skipped == "" || r.NearMemory == nil || r.NearMemory.Skipped == "" {
			t.Errorf("no near cache: coherence %+v, memory %+v; want both skipped", r.Coherence, r.NearMemory)
		}
		if !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "CLIENT TRACKING") }) {
			t.Errorf("no note on the near cache: %q", r.Notes)
		}
		return
	}
	if len(cold) != 1 || cold[0].LoaderCalls != 1 {
		t.Errorf("cold stampede with the near cache: %+v, want one row with 1 loader call", cold)
	}
	if len(hot) != 1 || hot[0].NearHits == 0 {
		t.Errorf("hot key with the near cache: %+v, want one row with near hits", hot)
	}
	for _, h := range r.NearHit {
		if h.Errors > 0 || h.Ops == 0 {
			t.Errorf("near hit %s: %d errors (%s) in %d ops", h.Mode, h.Errors, h.FirstError, h.Ops)
		}
		if (h.Mode == "stampede-near") != (h.NearHits > 0) {
			t.Errorf("near hit %s: %d near hits", h.Mode, h.NearHits)
		}
	}
	if len(r.NearHit) != 4 {
		t.Errorf("near hit path has %d modes, want 4", len(r.NearHit))
	}

	for _, c := range []*report.Coherence{r.Coherence, r.CoherencePaced} {
		switch {
		case c == nil || c.Skipped != "" || len(c.Rows) != 4:
			t.Errorf("coherence: %+v, want 4 rows", c)
		case c.NearHits == 0 || c.Reads < int64(c.Rows[3].Latency.N):
			t.Errorf("coherence (pace %v µs): the reader read %d times, %d from its near cache", c.PaceUs, c.Reads, c.NearHits)
		default:
			cycles := r.Config.CoherenceCycles
			for _, row := range c.Rows {
				want := cycles
				if row.Write == "all" {
					want = 3 * cycles
				}
				if row.Latency.N != want || row.NearBefore == 0 {
					t.Errorf("coherence (pace %v µs) %s: %d writes, %d met the old value in the near cache; want %d writes, most in the near cache",
						c.PaceUs, row.Write, row.Latency.N, row.NearBefore, want)
				}
			}
		}
	}

	m := r.NearMemory
	switch {
	case m == nil || m.Skipped != "":
		t.Errorf("near memory: %+v", m)
	case m.Present == 0 || m.HeapFilled <= 0 || m.FloodNearHits > int64(m.FloodKeys)/2:
		t.Errorf("near memory: %d of %d entries found again, heap %d; flood near hits %d of %d",
			m.Present, m.Entries, m.HeapFilled, m.FloodNearHits, m.FloodKeys)
	default:
		// Unbounded, the flood would keep FloodKeys/FloodMax (10) times
		// what FloodMax entries take.
		bound := float64(m.HeapFilled) / float64(m.Entries) * float64(m.FloodMax)
		if ratio := float64(m.FloodAfter) / bound; ratio > 3 {
			t.Errorf("near memory: after a flood of %d keys the heap is %d bytes, %.1f× what %d entries take",
				m.FloodKeys, m.FloodAfter, ratio, m.FloodMax)
		}
	}
}

func TestParseFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"defaults", nil, ""},
		{"quick", []string{"-quick"}, ""},
		{"quick keeps explicit flags", []string{"-quick", "-procs", "2", "-scenarios", "cold,hot"}, ""},
		{"unknown scenario", []string{"-scenarios", "cold,warm"}, `unknown scenario "warm"`},
		{"no scenario", []string{"-scenarios", ","}, "no scenario"},
		{"ttl too short for the load", []string{"-ttl", "150ms", "-load", "100ms"}, "must exceed twice"},
		{"duration too short", []string{"-duration", "1s", "-ttl", "1s"}, "at least twice"},
		{"too many procs", []string{"-procs", "100"}, "-procs 100"},
		{"rate below procs", []string{"-rate", "2"}, "-rate 2"},
		{"page rate below procs", []string{"-page-rate", "2"}, "-page-rate 2"},
		{"page phase too short for the render", []string{"-page-phase", "100ms", "-page-render", "50ms"}, "-page-phase 100ms"},
		{"stray argument", []string{"cold"}, "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			o, err := parseFlags(tt.args, &stderr)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want one containing %q (options %+v)", err, tt.wantErr, o)
			}
		})
	}
	o, err := parseFlags([]string{"-quick", "-procs", "2"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if q := defaults(true); o.cfg.Procs != 2 || o.cfg.Load != q.Load || o.cfg.TTL != q.TTL {
		t.Errorf("-quick -procs 2 gave %+v; want quick defaults with 2 processes", o.cfg)
	}
}

// checkGaps checks the gap scenarios: every run of stampede loaded once,
// singleflight once per process at most, each run traced; the lock cycles
// of both approaches ran without an error.
func checkGaps(t *testing.T, r *report.Results) {
	t.Helper()
	if len(r.ColdGap) < 2 {
		t.Fatalf("cold gap has %d rows, want stampede and singleflight at least", len(r.ColdGap))
	}
	for _, g := range r.ColdGap {
		if len(g.Runs) != r.Config.Reps || g.Errors > 0 {
			t.Errorf("cold gap %s: %d runs (want %d), %d errors (%s)", g.Approach, len(g.Runs), r.Config.Reps, g.Errors, g.FirstError)
		}
		for i, run := range g.Runs {
			switch {
			case strings.HasPrefix(g.Approach, "stampede") && run.LoaderCalls != 1:
				t.Errorf("cold gap %s run %d: %d loads, want 1", g.Approach, i, run.LoaderCalls)
			case g.Approach == "singleflight" && (run.LoaderCalls < 1 || run.LoaderCalls > int64(g.Procs)):
				t.Errorf("cold gap singleflight run %d: %d loads, want 1 to %d", i, run.LoaderCalls, g.Procs)
			}
			// The trace: every request returned after the load that
			// served it ended (no negative wake-up).
			if run.AfterLoad.N != g.Procs*g.Goroutines || run.FirstLoadMs <= 0 {
				t.Errorf("cold gap %s run %d: %d requests traced of %d, first load at %v ms", g.Approach, i,
					run.AfterLoad.N, g.Procs*g.Goroutines, run.FirstLoadMs)
			}
		}
	}
	if len(r.LockGap) != 5 {
		t.Fatalf("lock gap has %d rows, want raw, stampede and rueidislock, and the first two on AutoPipeline", len(r.LockGap))
	}
	for _, g := range r.LockGap {
		if g.Errors > 0 || g.PerSec <= 0 || len(g.Runs) != r.Config.Reps {
			t.Errorf("lock gap %s: %.0f cycles/s, %d errors (%s), %d runs", g.Approach, g.PerSec, g.Errors, g.FirstError, len(g.Runs))
		}
	}
	if r.LockGap[0].VsRaw != 1 {
		t.Errorf("lock gap: the raw commands are %.2f× themselves", r.LockGap[0].VsRaw)
	}
}
