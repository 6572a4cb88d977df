package cache_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// The decisive tests run separate OS processes, as pods are: the test
// binary re-executed as a worker (see redistest.Spawn). Workers read their
// parameters from CACHETEST_* variables, start when the test pushes to
// their "go" list, and report on stdout.
var workers = map[string]func() int{
	"stampede": workerStampede,
	"hot":      workerHot,
	"block":    workerBlock,
	"delete":   workerDelete,
	"wake":     workerWake,
	"waiter":   workerWaiter,
}

func env(name string) string { return os.Getenv("CACHETEST_" + name) }

func envInt(name string) int {
	n, err := strconv.Atoi(env(name))
	if err != nil {
		panic(fmt.Sprintf("worker: CACHETEST_%s: %v", name, err))
	}
	return n
}

func envDur(name string) time.Duration {
	d, err := time.ParseDuration(env(name))
	if err != nil {
		panic(fmt.Sprintf("worker: CACHETEST_%s: %v", name, err))
	}
	return d
}

// workerCache connects and creates the Cache the test described.
func workerCache() (*cache.Cache, redis.UniversalClient) {
	rc := redistest.WorkerClient()
	c, err := cache.New(rc, &cache.Options{
		Namespace: env("NS"), Expiry: cache.ExpiryPolicy{Fresh: envDur("TTL"), Stale: envDur("STALE")},
		LockTTL: envDur("LOCKTTL"), WaitTimeout: 20 * time.Second, LoadTimeout: 20 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	return c, rc
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "worker:", err)
	return 1
}

// ready says so and blocks until the test pushes to the worker's go list.
func ready(rc redis.UniversalClient) error {
	fmt.Println("ready")
	_, err := rc.BLPop(context.Background(), 30*time.Second, env("GO")).Result()
	return err
}

type procs struct {
	t      *testing.T
	s      *redistest.Server
	rc     redis.UniversalClient
	ps     []*redistest.Proc
	goList string
}

// spawn starts n workers of one role and waits until all are ready.
func spawn(t *testing.T, s *redistest.Server, n int, role string, vars ...string) *procs {
	t.Helper()
	ctx := testCtx(t)
	p := &procs{t: t, s: s, rc: s.Client(t), goList: redistest.Key(t, "go")}
	base := []string{"CACHETEST_GO=" + p.goList, "CACHETEST_TTL=1m", "CACHETEST_STALE=0s", "CACHETEST_LOCKTTL=5s"}
	for range n {
		p.ps = append(p.ps, redistest.Spawn(t, s, role, append(base, vars...)...))
	}
	for i, w := range p.ps {
		select {
		case line, ok := <-w.Lines():
			if !ok || line != "ready" {
				out, err := w.Wait(ctx)
				t.Fatalf("worker %d did not get ready: %q %v", i, out, err)
			}
		case <-ctx.Done():
			t.Fatalf("worker %d did not get ready", i)
		}
	}
	return p
}

// start releases every worker at once.
func (p *procs) start() {
	p.t.Helper()
	args := make([]any, len(p.ps))
	for i := range args {
		args[i] = "go"
	}
	if err := p.rc.RPush(context.Background(), p.goList, args...).Err(); err != nil {
		p.t.Fatal(err)
	}
}

// wait collects every worker's remaining output lines.
func (p *procs) wait() [][]string {
	p.t.Helper()
	ctx := testCtx(p.t)
	var out [][]string
	for i, w := range p.ps {
		var lines []string
		for line := range w.Lines() {
			lines = append(lines, line)
		}
		if _, err := w.Wait(ctx); err != nil {
			p.t.Fatalf("worker %d: %v (output %q)", i, err, lines)
		}
		out = append(out, lines)
	}
	return out
}

// workerStampede: G goroutines ask for one absent key at once; the loader
// takes LOAD and counts its calls with INCR, so every process counts.
func workerStampede() int {
	c, rc := workerCache()
	defer rc.Close()
	defer c.Close()
	g, loadFor, key, counter := envInt("G"), envDur("LOAD"), env("KEY"), env("COUNTER")
	load := func(ctx context.Context) (string, error) {
		if err := rc.Incr(ctx, counter).Err(); err != nil {
			return "", err
		}
		time.Sleep(loadFor) // the expensive work
		return "value of " + key, nil
	}
	if err := ready(rc); err != nil {
		return fail(err)
	}
	ctx := context.Background()
	errs := make(chan error, g)
	var wg sync.WaitGroup
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := cache.GetOrLoad(ctx, c, key, load)
			if err == nil && v != "value of "+key {
				err = fmt.Errorf("got %q", v)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return fail(err)
		}
	}
	st := c.Stats()
	fmt.Printf("loads=%d waits=%d coalesced=%d\n", st.Loads, st.Waits, st.Coalesced)
	return 0
}

func TestGetOrLoad_coldStampede_processes(t *testing.T) {
	tests := []struct {
		kind           redistest.Kind
		procs, perProc int
	}{
		{redistest.Redis8, 4, 64},
		{redistest.Redis8, 8, 32},
		{redistest.Cluster, 4, 64},
		{redistest.Cluster, 8, 32},
		{redistest.Valkey, 4, 64},
		{redistest.Redis7, 4, 64},
		{redistest.Miniredis, 4, 64},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%dx%d", tt.kind, tt.procs, tt.perProc), func(t *testing.T) {
			s := redistest.Shared(t, tt.kind)
			key, counter := "report", redistest.Key(t, "loads")
			p := spawn(t, s, tt.procs, "stampede", "CACHETEST_NS="+namespace(t), "CACHETEST_KEY="+key,
				"CACHETEST_COUNTER="+counter, fmt.Sprintf("CACHETEST_G=%d", tt.perProc), "CACHETEST_LOAD=100ms")
			p.start()
			out := p.wait()
			loads, err := p.rc.Get(context.Background(), counter).Int()
			if err != nil {
				t.Fatal(err)
			}
			if loads != 1 {
				t.Errorf("%d processes × %d goroutines: the loader ran %d times, want 1 (%v)", tt.procs, tt.perProc, loads, out)
			}
		})
	}
}

// workerHot: after warming up, G goroutines request one key every EVERY
// for DURATION. The loader takes LOAD and appends its start time to a
// list. Each request's latency is printed as "lat <unix-ns> <ns>".
func workerHot() int {
	c, rc := workerCache()
	defer rc.Close()
	defer c.Close()
	g, every, dur, loadFor := envInt("G"), envDur("EVERY"), envDur("DURATION"), envDur("LOAD")
	key, list := env("KEY"), env("LIST")
	load := func(ctx context.Context) (int64, error) {
		now := time.Now().UnixNano()
		if err := rc.RPush(ctx, list, now).Err(); err != nil {
			return 0, err
		}
		time.Sleep(loadFor)
		return now, nil
	}
	ctx := context.Background()
	if _, err := cache.GetOrLoad(ctx, c, key, load); err != nil {
		return fail(err)
	}
	if err := ready(rc); err != nil {
		return fail(err)
	}
	before := c.Stats()
	end := time.Now().Add(dur)
	var mu sync.Mutex
	var lines []string
	errs := make(chan error, g)
	var wg sync.WaitGroup
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(every)
			defer t.Stop()
			for now := range t.C {
				if now.After(end) {
					errs <- nil
					return
				}
				start := time.Now()
				if _, err := cache.GetOrLoad(ctx, c, key, load); err != nil {
					errs <- err
					return
				}
				l := fmt.Sprintf("lat %d %d", start.UnixNano(), time.Since(start).Nanoseconds())
				mu.Lock()
				lines = append(lines, l)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return fail(err)
		}
	}
	for _, l := range lines {
		fmt.Println(l)
	}
	st := c.Stats()
	fmt.Printf("stats misses=%d stale=%d hits=%d\n", st.Misses-before.Misses, st.StaleHits-before.StaleHits, st.Hits-before.Hits)
	return 0
}

// TestGetOrLoad_hotKey_processes: steady traffic from 4 processes across
// at least 5 expiries of a 1s key. Exactly one load per expiry, and no
// request after warm-up takes the miss path: while a stale value exists,
// nobody waits for the loader.
func TestGetOrLoad_hotKey_processes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		const procs = 4
		ttl, load, dur := time.Second, 100*time.Millisecond, 5500*time.Millisecond
		key, list := "hot", redistest.Key(t, "loads")
		p := spawn(t, s, procs, "hot", "CACHETEST_NS="+namespace(t), "CACHETEST_KEY="+key, "CACHETEST_LIST="+list,
			"CACHETEST_TTL="+ttl.String(), "CACHETEST_STALE=1m", "CACHETEST_LOAD="+load.String(),
			"CACHETEST_G=4", "CACHETEST_EVERY=10ms", "CACHETEST_DURATION="+dur.String())
		p.start()
		out := p.wait()

		var lats []latency
		for i, lines := range out {
			for _, l := range lines {
				f := strings.Fields(l)
				switch f[0] {
				case "lat":
					at, _ := strconv.ParseInt(f[1], 10, 64)
					ns, _ := strconv.ParseInt(f[2], 10, 64)
					lats = append(lats, latency{time.Unix(0, at), time.Duration(ns)})
				case "stats":
					if !strings.Contains(l, "misses=0 ") || strings.Contains(l, "stale=0 ") {
						t.Errorf("worker %d: %s; want no misses and some stale hits after warm-up", i, l)
					}
				}
			}
		}
		starts, err := p.rc.LRange(context.Background(), list, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		var loads []time.Time
		for _, s := range starts {
			ns, _ := strconv.ParseInt(s, 10, 64)
			loads = append(loads, time.Unix(0, ns))
		}
		// The first load is the warm-up; after that the value expires every
		// TTL (+ load time, + the time to notice) and is refreshed once per
		// expiry: 5 cycles of at least 1.1s fit 5.5s only on an idle
		// machine, so 4 refreshes are what the test asks to see.
		if len(loads) < 5 {
			t.Fatalf("%d loads in %v, want the warm-up and at least 4 refreshes", len(loads), dur)
		}
		for i := 1; i < len(loads); i++ {
			if gap := loads[i].Sub(loads[i-1]); gap < ttl {
				t.Errorf("loads %d and %d only %v apart: more than one load for one expiry", i-1, i, gap)
			}
		}
		t.Logf("%d loads, %d requests; %s", len(loads), len(lats), aroundExpiry(lats, loads[1:], 200*time.Millisecond))
	})
}

type latency struct {
	at time.Time
	d  time.Duration
}

// aroundExpiry summarises the latencies of all requests and of those
// started within window after a refresh began (i.e. right after expiry).
func aroundExpiry(lats []latency, refreshes []time.Time, window time.Duration) string {
	var all, near []time.Duration
	for _, l := range lats {
		all = append(all, l.d)
		for _, r := range refreshes {
			if !l.at.Before(r) && l.at.Sub(r) < window {
				near = append(near, l.d)
				break
			}
		}
	}
	return "all: " + percentiles(all) + "; within " + window.String() + " after expiry: " + percentiles(near)
}

func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	return fmt.Sprintf("n=%d p50=%v p99=%v max=%v", len(ds), q(0.5), q(0.99), ds[len(ds)-1])
}

// workerBlock claims KEY by starting its load, says "loading", and then
// follows MODE: "hang" blocks forever (the test kills it), "fail" fails
// with "database is down" when the test pushes to RELEASE.
func workerBlock() int {
	c, rc := workerCache()
	defer rc.Close()
	defer c.Close()
	ctx := context.Background()
	_, err := cache.GetOrLoad(ctx, c, env("KEY"), func(ctx context.Context) (string, error) {
		fmt.Println("loading")
		if env("MODE") == "hang" {
			select {}
		}
		if _, err := rc.BLPop(ctx, 30*time.Second, env("RELEASE")).Result(); err != nil {
			return "", err
		}
		return "", errors.New("database is down")
	})
	if err == nil {
		return fail(errors.New("the failing load returned no error"))
	}
	return 0
}

// blockWorker starts a workerBlock and waits until its loader runs.
func blockWorker(t *testing.T, s *redistest.Server, ns, key, mode, release string) *redistest.Proc {
	t.Helper()
	w := redistest.Spawn(t, s, "block", "CACHETEST_NS="+ns, "CACHETEST_KEY="+key, "CACHETEST_MODE="+mode,
		"CACHETEST_RELEASE="+release, "CACHETEST_TTL=1m", "CACHETEST_STALE=0s", "CACHETEST_LOCKTTL=500ms")
	select {
	case line := <-w.Lines():
		if line != "loading" {
			t.Fatalf("worker said %q", line)
		}
	case <-testCtx(t).Done():
		t.Fatal("worker never started loading")
	}
	return w
}

// TestGetOrLoad_rebuilderDies: the process loading a key is killed; a
// waiter in another process takes over once the claim expires.
func TestGetOrLoad_rebuilderDies_processes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		w := blockWorker(t, s, ns, "k", "hang", "")
		c, _ := newCache(t, s, &cache.Options{Namespace: ns, LockTTL: 500 * time.Millisecond})
		got := make(chan error, 1)
		loads := 0
		go func() {
			v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) { loads++; return "mine", nil })
			if err == nil && v != "mine" {
				err = fmt.Errorf("got %q", v)
			}
			got <- err
		}()
		w.Kill()
		if err := <-got; err != nil {
			t.Fatal(err)
		}
		if st := c.Stats(); loads != 1 || st.Waits != 1 || st.WaitTimeouts != 0 {
			t.Errorf("%d loads, stats %+v; want one load after one wait", loads, st)
		}
	})
}

// TestGetOrLoad_remoteFailure: a waiter learns at once that the loading
// process failed, with its error text, instead of waiting out its limit.
func TestGetOrLoad_remoteFailure_processes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns, release := namespace(t), redistest.Key(t, "release")
		w := blockWorker(t, s, ns, "k", "fail", release)
		var events []cache.Event
		var mu sync.Mutex
		c, rc := newCache(t, s, &cache.Options{Namespace: ns, WaitTimeout: time.Minute, LoadTimeout: 2 * time.Minute,
			Observer: func(e cache.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }})
		got := make(chan error, 1)
		go func() {
			_, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) {
				return "", errors.New("the waiter must not load")
			})
			got <- err
		}()
		// Release the worker's loader once this process waits for it
		// with a subscription the server confirmed before its read: an
		// error is announced, never stored, so a waiter whose read comes
		// after the failure finds the key free and loads (as a new caller
		// would). Waiting for the server's NUMSUB was not enough: the
		// subscription confirmed after the first read sends the waiter to
		// read the key again, and the release could come before that read.
		redistest.WaitFor(t, ctx, "this process to wait, subscribed", func() bool { return cache.CoveredWaits(c) > 0 })
		if err := rc.RPush(ctx, release, "fail").Err(); err != nil {
			t.Fatal(err)
		}
		err := <-got
		if !errors.Is(err, cache.ErrRemoteLoad) || !strings.Contains(err.Error(), "database is down") {
			t.Fatalf("err = %v, want ErrRemoteLoad carrying the remote error", err)
		}
		if st := c.Stats(); st.Loads != 0 || st.WaitTimeouts != 0 {
			t.Errorf("stats %+v: want no local load and no wait timeout", st)
		}
		if _, err := w.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// workerDelete deletes KEY and says "deleted".
func workerDelete() int {
	c, rc := workerCache()
	defer rc.Close()
	defer c.Close()
	if err := c.Delete(context.Background(), env("KEY")); err != nil {
		return fail(err)
	}
	fmt.Println("deleted")
	return 0
}

// TestGetOrLoad_deleteDuringRebuild: a Delete from another process while a
// load runs makes that load's write a no-op; its caller still gets what it
// loaded.
func TestGetOrLoad_deleteDuringRebuild_processes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		for _, stale := range []bool{false, true} {
			t.Run(map[bool]string{false: "from miss", true: "from stale"}[stale], func(t *testing.T) {
				now := time.Now()
				clock := func() time.Time { return now }
				c, _ := newCache(t, s, &cache.Options{Namespace: ns, Expiry: cache.ExpiryPolicy{Stale: time.Hour}, Now: func() time.Time { return clock() }})
				key := redistest.Key(t, "k")
				if stale {
					if err := cache.Set(ctx, c, key, "old"); err != nil {
						t.Fatal(err)
					}
					clock = func() time.Time { return now.Add(2 * time.Minute) } // past TTL, within Expiry.Stale
				}
				loaded := make(chan string, 1)
				load := func(ctx context.Context) (string, error) {
					w := redistest.Spawn(t, s, "delete", "CACHETEST_NS="+ns, "CACHETEST_KEY="+key,
						"CACHETEST_TTL=1m", "CACHETEST_STALE=0s", "CACHETEST_LOCKTTL=5s")
					out, err := w.Wait(ctx)
					if err != nil || strings.TrimSpace(out) != "deleted" {
						return "", fmt.Errorf("delete worker: %q %v", out, err)
					}
					loaded <- "new"
					return "new", nil
				}
				v, err := cache.GetOrLoad(ctx, c, key, load)
				if stale {
					// The stale value is served; the refresh runs behind it.
					if err != nil || v != "old" {
						t.Fatalf("stale GetOrLoad = %q, %v", v, err)
					}
					<-loaded
					redistest.WaitFor(t, ctx, "the refresh to finish", func() bool {
						st := c.Stats()
						return st.WritesSkipped > 0 || st.ServerErrors > 0
					})
				} else if err != nil || v != "new" {
					t.Fatalf("GetOrLoad = %q, %v; want the loaded value", v, err)
				}
				if _, err := cache.Get[string](ctx, c, key); !errors.Is(err, cache.ErrMiss) {
					t.Errorf("after the Delete: Get = %v, want ErrMiss (the rebuild must not write)", err)
				}
				if st := c.Stats(); st.WritesSkipped != 1 {
					t.Errorf("WritesSkipped = %d, want 1", st.WritesSkipped)
				}
			})
		}
	})
}
