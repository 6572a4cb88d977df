package scenarios

import (
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/bench/report"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/internal/toolkit/embedded"
)

// pageEnv returns an Env for the page purge scenario at its short size
// (3 processes, 300 requests/s, phases of 400 ms, a 20 ms render), on the
// embedded server, or on a Redis 8 server of the test's own (near caches
// on).
func pageEnv(tb testing.TB, redis8 bool) *Env {
	tb.Helper()
	var url string
	if redis8 {
		url = "redis://" + redistest.Start(tb, redistest.Redis8).Addrs()[0]
	} else {
		s, err := embedded.Start()
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(s.Close)
		url = "redis://" + s.Addr()
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		tb.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	tb.Cleanup(func() { _ = rdb.Close() })
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	ps := NewPods(exe, url)
	tb.Cleanup(func() { ps.Close(0) })
	p := report.NewProgress(io.Discard, false, len(pagePlans()))
	tb.Cleanup(p.Close)
	return &Env{Cfg: Config{Procs: 3, PageRate: 300, PagePhase: 400 * time.Millisecond, PageRender: 20 * time.Millisecond},
		RDB: rdb, Pods: ps, Progress: p, RunID: "t" + strings.ReplaceAll(tb.Name(), "/", "-"), Embedded: !redis8}
}

// TestPagePurge_short is the page purge scenario's short form, with real
// worker processes: after SoftPurgeTag one render in the fleet,
// conditional, in the background (no request rendered; some were served
// stale); after PurgeTag one render stored in the fleet; the per-process
// model renders once in each process after its purge (see
// CheckPagePurge). It asserts counts, never times.
func TestPagePurge_short(t *testing.T) {
	for _, redis8 := range []bool{false, true} {
		name := "embedded"
		if redis8 {
			name = "redis8"
		}
		t.Run(name, func(t *testing.T) {
			e := pageEnv(t, redis8)
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			near := e.NearWorks(ctx)
			if near != redis8 {
				t.Errorf("near cache works: %v, want %v", near, redis8)
			}
			for _, plan := range pagePlans() {
				rows, err := pagePurgeRun(ctx, e, plan, near)
				if err != nil {
					t.Fatalf("%s: %v", plan.approach, err)
				}
				if want := len(plan.purges) + 1; len(rows) != want {
					t.Fatalf("%s: %d phases, want %d", plan.approach, len(rows), want)
				}
				for _, bad := range CheckPagePurge(rows, e.Cfg.Procs) {
					t.Error(bad)
				}
				if t.Failed() {
					t.Logf("%s: %+v", plan.approach, rows)
				}
			}
		})
	}
}

// TestPagePurge_shortCatchesHard: the short form's check fails when the
// purge that begins the soft phase is a hard one (PurgeTag in place of
// SoftPurgeTag): the render is not conditional, requests wait for it,
// none is served stale.
func TestPagePurge_shortCatchesHard(t *testing.T) {
	e := pageEnv(t, false)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	plan := pagePlan{approach: report.PageStampede, purges: []pagePurgeStep{{Label: "soft", Purge: "hard"}}}
	rows, err := pagePurgeRun(ctx, e, plan, false)
	if err != nil {
		t.Fatal(err)
	}
	bad := CheckPagePurge(rows, e.Cfg.Procs)
	if len(bad) == 0 || !strings.Contains(strings.Join(bad, "\n"), "stampede-page, soft: ") {
		t.Fatalf("the check passed a hard purge as a soft one: %v\n%+v", bad, rows)
	}
	t.Logf("caught: %s", strings.Join(bad, "; "))
}

// TestPageSummary: requests go to the phase they lay within, those in
// flight during a purge call to neither (the later one's Across), and
// renders to the phase they began in.
func TestPageSummary(t *testing.T) {
	plan := pagePlan{approach: report.PageStampede, purges: []pagePurgeStep{{"soft", "soft"}, {"hard", "hard"}}}
	c := Config{PageRate: 100, PagePhase: time.Second, PageRender: 50 * time.Millisecond}
	const ms = 1000 // µs
	res := []podResult{
		{
			Purges: [][2]int64{{1000 * ms, 1100 * ms}, {2000 * ms, 2100 * ms}},
			At:     []int64{0, 950 * ms, 1050 * ms, 1200 * ms, 1990 * ms, 2050 * ms, 2500 * ms},
			Lat:    []int64{100, 60 * ms, 10 * ms, 30 * ms, 20 * ms, 40 * ms, 100},
			Served: []string{"hit", "hit", "stale", "stale", "hit", "miss", "collapsed"},
			Renders: []pageRender{
				{At: 1150 * ms, Cond: true},
				{At: 2060 * ms},
			},
		},
		{
			At:      []int64{10 * ms, 1500 * ms, 2200 * ms},
			Lat:     []int64{100, 100, 26 * ms},
			Served:  []string{"hit", "stale", "not stored"},
			Renders: []pageRender{{At: 2210 * ms}},
		},
	}
	rows, err := pageSummary(plan, res, c)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		phase                                        string
		requests, across, renders, cond, procs, slow int
		waited, stale, acrossStale, acrossCollapsed  int
	}{
		{"steady", 2, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		// 950 ms + 60 ends after 1000 and 1050 begins before 1100:
		// across; 1200 (slow: 30 ms), 1500 are in.
		{"soft", 2, 2, 1, 1, 1, 1, 0, 2, 1, 0},
		// 1990 + 20 and 2050 (before 2100) are across; 2200 (not
		// stored, slow: 26 ms) and 2500 are in.
		{"hard", 2, 2, 2, 0, 2, 1, 2, 0, 0, 0},
	}
	for k, w := range want {
		r := rows[k]
		got := []int{r.Requests, r.Across, r.Renders, r.Conditional, r.RenderProcs, r.Slow, r.Waited(), r.Served["stale"], r.AcrossServed["stale"], r.AcrossServed["collapsed"]}
		exp := []int{w.requests, w.across, w.renders, w.cond, w.procs, w.slow, w.waited, w.stale, w.acrossStale, w.acrossCollapsed}
		if r.Phase != w.phase || !slices.Equal(got, exp) {
			t.Errorf("phase %d: %s %v, want %s %v", k, r.Phase, got, w.phase, exp)
		}
	}
	// The hard phase's second render, given to its request alone (not
	// stored), is one too many: the check reports it, and passes one
	// stored render.
	if bad := CheckPagePurge(rows, 2); len(bad) != 1 || !strings.Contains(bad[0], "hard: 2 renders (1 not stored)") {
		t.Errorf("check with a render not stored: %v", bad)
	}
	rows[2].Renders, rows[2].Served = 1, map[string]int{"hit": 2}
	if bad := CheckPagePurge(rows, 2); len(bad) != 0 {
		t.Errorf("check of one stored render: %v", bad)
	}
}
