package compare

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocache "github.com/go-redis/cache/v9"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/viccon/sturdyc"
)

const (
	hitGoroutines = 32  // readers in the one process
	hitValueSize  = 256 // bytes of the warm value
)

// hitRow is one library reading one warm key: the hit path.
type hitRow struct {
	name   string // as in the README table and the sub-benchmark names
	server bool   // every read is a round trip, so the test runs fewer
	get    getter
	loads  *atomic.Int64 // loader calls; nil for the raw GET
	near   func() uint64 // hits answered from the near cache so far, or nil
}

// hitValue returns a value of hitValueSize bytes that no compression
// shrinks much (go-redis/cache compresses every value over 64 bytes).
func hitValue(tb testing.TB) string {
	tb.Helper()
	b := make([]byte, hitValueSize/2)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// hitRows sets up every row on s, each with its own client and key, and
// reads each key once so that it is warm (and, for the near cache, until
// reads are answered from it).
func hitRows(tb testing.TB, s *redistest.Server, value string) []hitRow {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rows []hitRow
	loadFn := func(n *atomic.Int64) func(context.Context) (string, error) {
		return func(context.Context) (string, error) {
			n.Add(1)
			return value, nil
		}
	}

	// (a) raw go-redis GET: the baseline.
	rc := s.Client(tb)
	rawKey := redistest.Key(tb, "raw")
	if err := rc.Set(ctx, rawKey, value, 0).Err(); err != nil {
		tb.Fatal(err)
	}
	rows = append(rows, hitRow{name: "raw-GET", server: true,
		get: func(ctx context.Context) (string, error) { return rc.Get(ctx, rawKey).Result() }})

	// (b) and (c) stampede, without and with the near cache.
	for _, near := range []bool{false, true} {
		opts := cache.Options{Expiry: cache.ExpiryPolicy{Fresh: time.Hour}}
		name := "stampede"
		if near {
			opts.Near = &cache.Near{MaxEntries: 100_000}
			name = "stampede-near"
		}
		c := newStampede(tb, s, namespace(), opts)
		key := redistest.Key(tb, name)
		loads := new(atomic.Int64)
		load := loader.Func[string](loadFn(loads))
		get := func(ctx context.Context) (string, error) { return cache.GetOrLoad(ctx, c, key, load) }
		row := hitRow{name: name, server: !near, get: get, loads: loads}
		if _, err := get(ctx); err != nil {
			tb.Fatal(err)
		}
		if near {
			redistest.WaitFor(tb, ctx, "near cache active", c.NearActive)
			redistest.WaitFor(tb, ctx, "a near hit", func() bool {
				_, err := get(ctx)
				return err == nil && c.Stats().NearHits > 0
			})
			row.near = func() uint64 { return c.Stats().NearHits }
		}
		rows = append(rows, row)
	}

	// (d) and (e) go-redis/cache's Once, without and with its TinyLFU
	// local cache.
	for _, local := range []bool{false, true} {
		opts := gocache.Options{Redis: s.Client(tb)}
		name := "go-redis-cache"
		if local {
			opts.LocalCache = gocache.NewTinyLFU(1000, time.Minute)
			name = "go-redis-cache-TinyLFU"
		}
		gc := gocache.New(&opts)
		key := redistest.Key(tb, name)
		loads := new(atomic.Int64)
		load := loadFn(loads)
		get := func(ctx context.Context) (string, error) {
			var v string
			err := gc.Once(&gocache.Item{Ctx: ctx, Key: key, Value: &v, TTL: time.Hour,
				Do: func(*gocache.Item) (any, error) { return load(ctx) }})
			return v, err
		}
		if _, err := get(ctx); err != nil {
			tb.Fatal(err)
		}
		rows = append(rows, hitRow{name: name, server: !local, get: get, loads: loads})
	}

	// (f) sturdyc, in memory only.
	sc := sturdyc.New[string](100, 1, time.Hour, 10, sturdyc.WithNoContinuousEvictions())
	key := redistest.Key(tb, "sturdyc")
	loads := new(atomic.Int64)
	fetch := sturdyc.FetchFn[string](loadFn(loads))
	get := func(ctx context.Context) (string, error) { return sc.GetOrFetch(ctx, key, fetch) }
	if _, err := get(ctx); err != nil {
		tb.Fatal(err)
	}
	rows = append(rows, hitRow{name: "sturdyc", get: get, loads: loads})
	return rows
}

// hitRun makes ops calls of get from hitGoroutines goroutines, released
// at once, and returns the calls per second and the allocations per call
// (process-wide, as testing.B counts them). Every call must return want.
func hitRun(ctx context.Context, get getter, want string, ops int64) (perSec, allocs float64, err error) {
	var (
		next     atomic.Int64
		release  = make(chan struct{})
		errs     = make(chan error, hitGoroutines)
		wg       sync.WaitGroup
		mem0     runtime.MemStats
		mem1     runtime.MemStats
		firstErr error
	)
	for range hitGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-release
			for next.Add(1) <= ops {
				v, err := get(ctx)
				if err == nil && v != want {
					err = fmt.Errorf("got %d bytes, want the %d-byte value", len(v), len(want))
				}
				if err != nil {
					errs <- err
					next.Store(ops) // the others stop too
					return
				}
			}
		}()
	}
	runtime.GC()
	runtime.ReadMemStats(&mem0)
	start := time.Now()
	close(release)
	wg.Wait()
	took := time.Since(start)
	runtime.ReadMemStats(&mem1)
	close(errs)
	for e := range errs {
		firstErr = errors.Join(firstErr, e)
	}
	if firstErr != nil {
		return 0, 0, firstErr
	}
	return float64(ops) / took.Seconds(), float64(mem1.Mallocs-mem0.Mallocs) / float64(ops), nil
}

// TestCompare_hitPath: one process, 32 goroutines, one warm key holding
// 256 bytes, reads only, on every library in one run. The rows take turns
// over hitRounds rounds and each reports its median, so that a change in
// the machine's load lands on every row alike. Only ratios between rows
// of this run are asserted.
func TestCompare_hitPath(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	const (
		serverOps = 20_000  // rows where every read is a round trip
		memoryOps = 200_000 // rows answered in process
		hitRounds = 5
		row       = "hit path, 1 process x 32 goroutines, 256 B"
	)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	value := hitValue(t)
	rows := hitRows(t, s, value)
	type run struct{ perSec, allocs, callsPerGET float64 }
	runs := make([][]run, len(rows))
	loads0 := make([]int64, len(rows))
	for i, r := range rows {
		if r.loads != nil {
			loads0[i] = r.loads.Load()
		}
	}
	for range hitRounds {
		for i, r := range rows {
			ops := int64(memoryOps)
			if r.server {
				ops = serverOps
			}
			var near0 uint64
			if r.near != nil {
				near0 = r.near()
			}
			gets0 := getCalls(t, s)
			ps, allocs, err := hitRun(ctx, r.get, value, ops)
			if err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			// How many calls each GET answered: what sharing GETs saves.
			perGET := float64(ops) / float64(max(getCalls(t, s)-gets0, 1))
			runs[i] = append(runs[i], run{ps, allocs, perGET})
			if r.near != nil {
				// Not asserted: a lapse of the Lease on a loaded machine
				// sends reads to the server, which the ratio shows.
				t.Logf("%s: %d of %d reads answered from the near cache", r.name, r.near()-near0, ops)
			}
		}
	}
	perSec := map[string]float64{}
	for i, r := range rows {
		med := func(f func(run) float64) float64 {
			xs := make([]float64, len(runs[i]))
			for j, x := range runs[i] {
				xs[j] = f(x)
			}
			slices.Sort(xs)
			return xs[len(xs)/2]
		}
		perSec[r.name] = med(func(x run) float64 { return x.perSec })
		result(t, row, r.name, "ops/s", fmt.Sprintf("%.0f allocs/op=%.1f", perSec[r.name], med(func(x run) float64 { return x.allocs })))
		if r.server {
			result(t, row, r.name, "calls-per-GET", fmt.Sprintf("%.1f", med(func(x run) float64 { return x.callsPerGET })))
		}
		if r.loads != nil {
			if n := r.loads.Load() - loads0[i]; n != 0 {
				t.Errorf("%s: %d loader calls during the runs on a warm key, want 0", r.name, n)
			}
		}
	}
	raw := perSec["raw-GET"]
	if t.Failed() || raw == 0 {
		return
	}
	for _, r := range rows {
		result(t, row, r.name, "ratio-to-raw-GET", fmt.Sprintf("%.2f", perSec[r.name]/raw))
	}
	// Wide margins: the machine is shared, and race mode slows the
	// in-process rows far more than the round trips.
	if got := perSec["stampede-near"] / raw; got < 5 {
		t.Errorf("stampede with the near cache: %.2f× the raw GET's ops/s, want ≥ 5×", got)
	}
	if got := perSec["stampede"] / raw; got < 0.5 {
		t.Errorf("stampede without the near cache: %.2f× the raw GET's ops/s, want ≥ 0.5×", got)
	}
	result(t, row, "stampede", "ratio-to-go-redis-cache", fmt.Sprintf("%.2f", perSec["stampede"]/perSec["go-redis-cache"]))
	result(t, row, "stampede-near", "ratio-to-sturdyc", fmt.Sprintf("%.2f", perSec["stampede-near"]/perSec["sturdyc"]))
}

// getCalls returns how many GETs s has answered (INFO commandstats).
func getCalls(t *testing.T, s *redistest.Server) int64 {
	t.Helper()
	info, err := s.Client(t).Info(t.Context(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(line, "cmdstat_get:calls="); ok {
			n, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			if err != nil {
				t.Fatalf("INFO commandstats: %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}

// BenchmarkHit measures the rows of TestCompare_hitPath with the
// benchmark machinery: 32 reader goroutines whatever GOMAXPROCS is (16 per
// P on 2 cores).
func BenchmarkHit(b *testing.B) {
	s := redistest.Shared(b, redistest.Redis8)
	value := hitValue(b)
	par := max(1, hitGoroutines/runtime.GOMAXPROCS(0))
	for _, r := range hitRows(b, s, value) {
		b.Run(r.name, func(b *testing.B) {
			ctx := context.Background()
			var near0 uint64
			if r.near != nil {
				near0 = r.near()
			}
			b.SetParallelism(par)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					v, err := r.get(ctx)
					if err == nil && v != value {
						err = fmt.Errorf("got %d bytes, want the %d-byte value", len(v), len(value))
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			if r.near != nil {
				b.ReportMetric(float64(r.near()-near0)/float64(b.N), "near-hits/op")
			}
		})
	}
}
