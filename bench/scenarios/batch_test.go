package scenarios

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/bench/report"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// TestBatchRefresh_short is the batched refresh scenario's short form on
// a Redis 8 server, with real worker processes (3 of them, 300 keys
// falling due within 100 ms, 3,000 requests/s): with the Batcher and
// GetOrLoad every key is refreshed once in the fleet, with sturdyc once
// in each process (its cache is the process's own); no request fails;
// the Batcher's loader calls have at most MaxKeys keys and average at
// least 5 (each process's claims in rounds of up to 100 ms), GetOrLoad's
// one key each. It asserts counts, never times.
func TestBatchRefresh_short(t *testing.T) {
	url := "redis://" + redistest.Start(t, redistest.Redis8).Addrs()[0]
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ps := NewPods(exe, url)
	t.Cleanup(func() { ps.Close(0) })
	p := report.NewProgress(io.Discard, false, len(batchApproaches()))
	t.Cleanup(p.Close)
	e := &Env{Cfg: Config{Procs: 3, BatchKeys: 300, BatchSpread: 100 * time.Millisecond, BatchLead: 500 * time.Millisecond,
		BatchRate: 3000, BatchLoad: 20 * time.Millisecond, BatchWindow: 100 * time.Millisecond, BatchMax: 100},
		RDB: rdb, Pods: ps, Progress: p, RunID: "t" + strings.ReplaceAll(t.Name(), "/", "-")}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for _, a := range batchApproaches() {
		row, err := batchRun(ctx, e, a)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		keys := e.Cfg.BatchKeys
		if row.Errors > 0 || row.Refreshed != keys {
			t.Errorf("%s: %d errors (%s), %d of %d keys refreshed; want every key, no error", a, row.Errors, row.FirstError, row.Refreshed, keys)
		}
		if once := a != report.BatchSturdyc; once && row.Twice != 0 || !once && row.Twice != keys {
			t.Errorf("%s: %d keys loaded more than once (%d loads of %d keys)", a, row.Twice, row.Loads, keys)
		}
		switch a {
		case report.BatchBatcher:
			if row.Largest > e.Cfg.BatchMax || row.Calls > keys/5 {
				t.Errorf("%s: %d loader calls, the largest of %d keys; want at most %d, of at most %d", a, row.Calls, row.Largest, keys/5, e.Cfg.BatchMax)
			}
		case report.BatchGetOrLoad:
			if row.Largest != 1 || row.Calls != keys {
				t.Errorf("%s: %d loader calls, the largest of %d keys; want one per key", a, row.Calls, row.Largest)
			}
		}
		t.Logf("%s: %d calls (largest %d), refresh p99 %.2f ms, hit p99 %.2f ms", a, row.Calls, row.Largest, row.Refresh.P99, row.Hit.P99)
	}
}
