package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// TestMain also serves as the workers' entry point: the soak starts its
// own binary again as worker processes (internal/toolkit/fleet), and under go test
// that binary is this test binary.
func TestMain(m *testing.M) {
	if isWorker() {
		os.Exit(workerMain())
	}
	redistest.Main(m, nil)
}

// TestSoak_short is the soak's CI form: 20 s of mixed traffic from three
// worker processes with random faults, on a real Redis 8, two of them with
// the near cache, ending with the invariants of the long form (no lost
// updates, no stale sets, no value for the wrong key, no read older than
// the coherence bound, no growth of goroutines or heap) and with proof
// that the run did what it claims (loads, faults, refused late holders,
// hits from the near cache, tracking connections lost to the faults).
func TestSoak_short(t *testing.T) {
	srv := redistest.Start(t, redistest.Redis8)
	out := filepath.Join(t.TempDir(), "soak.json")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	start := time.Now()
	err := run(ctx, []string{"-duration", "18s", "-warmup", "2s", "-workers", "3", "-progress", "6s",
		"-redis", "redis://" + srv.Addrs()[0], "-json", out}, &stdout, &stderr)
	t.Logf("soak took %v\n%s%s", time.Since(start).Round(time.Millisecond), stderr.String(), stdout.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	s := readSummary(t, out)
	for _, c := range []struct {
		name string
		got  int64
	}{
		{"lost updates", s.LostUpdates},
		{"phantom updates", s.PhantomUpdates},
		{"stale sets", s.StaleSets},
		{"stale sets read by workers", s.StaleSetsRead},
		{"stale sets found by audits", s.StaleSetsAudit},
		{"stale sets at the end", s.StaleSetsAtEnd},
		{"values for the wrong key", s.WrongValues},
		{"wrong HTTP responses", s.WrongResponses},
		{"stale reads after own Delete", s.StaleReads + s.StaleReadsLocal},
		{"reads older than the coherence bound", s.BoundViolations},
		{"reads older than the coherence bound in near workers", s.CoherenceNear.Violations},
		{"reads older than the coherence bound in the other workers", s.CoherenceOther.Violations},
	} {
		if c.got != 0 {
			t.Errorf("%s = %d, want 0", c.name, c.got)
		}
	}
	faults := int64(0)
	for _, n := range s.Faults {
		faults += n
	}
	for _, c := range []struct {
		name string
		got  int64
	}{
		{"requests", s.Requests},
		{"loads", s.Loads},
		{"database updates", s.Writes},
		{"accepted fenced updates", s.AcceptedUpdates},
		{"faults injected", faults},
		{"connections reset or dropped by the proxies", int64(s.Proxy.Reset + s.Proxy.Dropped)},
		{"audit rounds", s.Audits},
		{"HTTP requests", s.HTTPRequests},
		{"HTTP renders", s.HTTPRenders},
		{"HTTP replies X-Cache HIT", s.XCache["HIT"]},
		{"HTTP replies X-Cache MISS", s.XCache["MISS"]},
		{"HTTP replies X-Cache BYPASS (private, Set-Cookie, Cookie)", s.XCache["BYPASS"]},
		{"HTTP hits rendered by another worker", s.HTTPElsewhere},
		{"reads that began with Get", s.Gets},
		{"reads checked against the coherence bound in near workers", s.CoherenceNear.Checked},
		{"reads checked against the coherence bound in the other workers", s.CoherenceOther.Checked},
		{"near cache hits", int64(s.NearCache.NearHits)},
		{"HTTP near cache hits", int64(s.HTTPCache.NearHits)},
		{"near cache invalidations", int64(s.NearCache.NearInvalidations)},
		{"tracking connections lost to the faults", s.CoherenceNear.Lost},
	} {
		if c.got <= 0 {
			t.Errorf("%s = %d, want > 0", c.name, c.got)
		}
	}
	if s.NearWorkers != 2 {
		t.Errorf("%d near workers, want 2 of 3", s.NearWorkers)
	}
	if s.NearCache.NearHits > s.NearCache.Hits+s.NearCache.StaleHits {
		t.Errorf("%d near hits of %d hits and stale hits", s.NearCache.NearHits, s.NearCache.Hits+s.NearCache.StaleHits)
	}
	if s.HTTPRenders >= s.HTTPRequests {
		t.Errorf("%d HTTP renders for %d requests: the middleware cached nothing", s.HTTPRenders, s.HTTPRequests)
	}
	if s.CounterTotal != s.AcceptedUpdates {
		t.Errorf("counters add up to %d, accepted updates %d", s.CounterTotal, s.AcceptedUpdates)
	}
	if len(s.Memory) != 3 {
		t.Fatalf("memory of %d workers, want 3", len(s.Memory))
	}
	for _, m := range s.Memory {
		if m.Start.Goroutines == 0 || m.End.Goroutines == 0 || m.Start.Heap == 0 || m.End.Heap == 0 {
			t.Errorf("%s: empty snapshot: %+v", m.Worker, m)
		}
		if d := m.End.Goroutines - m.Start.Goroutines; d > goroutineSlack {
			t.Errorf("%s: goroutines grew by %d", m.Worker, d)
		}
		if m.EndStacks != "" {
			t.Logf("%s: goroutines %d -> %d; at the end:\n%s", m.Worker, m.Start.Goroutines, m.End.Goroutines, m.EndStacks)
		}
		if m.End.Heap > max(2*m.Start.Heap, m.Start.Heap+heapSlack) {
			t.Errorf("%s: heap grew from %d to %d", m.Worker, m.Start.Heap, m.End.Heap)
		}
	}
	if !s.OK || len(s.Failures) != 0 {
		t.Errorf("summary says ok=%v, failures %q", s.OK, s.Failures)
	}
	if !strings.Contains(stdout.String(), "result: OK") || !strings.Contains(stderr.String(), "requests ") {
		t.Errorf("no summary table or progress line")
	}
}

// TestSoak_sabotaged breaks the invariants on purpose (workers store the
// version before an update right after its Delete, count increments they
// never write, and render one per-user page in 4 without Vary: X-User)
// and checks that the soak notices and fails. The stale values stored
// after a Delete are read for up to their TTL, well past the coherence
// bound, so the coherence check must find them too.
func TestSoak_sabotaged(t *testing.T) {
	srv := redistest.Start(t, redistest.Redis8)
	out := filepath.Join(t.TempDir(), "soak.json")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	o, err := parseFlags([]string{"-duration", "4s", "-warmup", "1s", "-workers", "2",
		"-redis", "redis://" + srv.Addrs()[0], "-json", out}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	o.sabotage = true
	s, err := soak(ctx, o, &stderr)
	if err != nil {
		t.Fatalf("soak: %v\n%s", err, stderr.String())
	}
	t.Logf("failures: %q; samples:\n%s", s.Failures, strings.Join(s.Samples, "\n"))
	if s.OK {
		t.Errorf("a sabotaged run passed")
	}
	if s.LostUpdates == 0 {
		t.Errorf("no lost update found; the sabotage skips one write in 20")
	}
	if s.StaleSetsRead+s.StaleSetsAudit == 0 {
		t.Errorf("no stale set found during the run (read by workers %d, audits %d); the sabotage writes one in 20",
			s.StaleSetsRead, s.StaleSetsAudit)
	}
	if s.WrongResponses == 0 {
		t.Errorf("no wrong HTTP response found in %d requests; the sabotage leaves Vary out of one per-user page in 4",
			s.HTTPRequests)
	}
	if s.BoundViolations == 0 {
		t.Errorf("no read older than the coherence bound found in %d checked; the sabotage stores a superseded version after one Delete in 20",
			s.CoherenceNear.Checked+s.CoherenceOther.Checked)
	}
	if len(s.Failures) < 4 {
		t.Errorf("failures %q, want lost updates, stale sets, wrong HTTP responses and reads older than the coherence bound", s.Failures)
	}
}

func readSummary(tb testing.TB, path string) summary {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	var s summary
	if err := json.Unmarshal(b, &s); err != nil {
		tb.Fatalf("%s: %v", path, err)
	}
	return s
}
