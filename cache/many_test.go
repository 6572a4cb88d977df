package cache_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// This file tests GetOrLoadMany: the per-key guarantees of GetOrLoad
// (one load per key across processes and within one, stale served and
// refreshed once, negative entries, errors never stored, fail open) and
// the batching (one loader call, one MGET per slot).

func init() { workers["many"] = workerMany }

// manyKinds are the servers every GetOrLoadMany behaviour must hold on.
var manyKinds = []redistest.Kind{redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster}

// batchLoader is a batch loader that records its calls. value says what a
// key holds (ok false: not found); a non-nil gate holds every call until
// it is closed, after telling entered.
type batchLoader struct {
	value   func(key string) (string, bool)
	gate    chan struct{}
	entered chan []string

	mu    sync.Mutex
	calls [][]string
}

func newBatchLoader(prefix string) *batchLoader {
	return &batchLoader{value: func(k string) (string, bool) { return prefix + k, true }}
}

func (l *batchLoader) load(ctx context.Context, keys []string) (map[string]string, error) {
	l.mu.Lock()
	l.calls = append(l.calls, slices.Clone(keys))
	l.mu.Unlock()
	if l.entered != nil {
		l.entered <- slices.Clone(keys)
	}
	if l.gate != nil {
		select {
		case <-l.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		if v, ok := l.value(k); ok {
			out[k] = v
		}
	}
	return out, nil
}

// loaded returns the calls so far and how often each key was loaded.
func (l *batchLoader) loaded() (calls [][]string, perKey map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	perKey = map[string]int{}
	for _, c := range l.calls {
		for _, k := range c {
			perKey[k]++
		}
	}
	return slices.Clone(l.calls), perKey
}

func keyRange(prefix string, from, to int) []string {
	var keys []string
	for i := from; i < to; i++ {
		keys = append(keys, fmt.Sprintf("%s%d", prefix, i))
	}
	return keys
}

// One call: one loader call with every missing key; keys the loader did
// not return are not found (absent, no error) and remembered for
// Expiry.Negative; the next call loads nothing. Repeated keys are read and
// loaded once.
func TestGetOrLoadMany_valuesAndNegative(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newCache(t, s, &cache.Options{Expiry: cache.ExpiryPolicy{Negative: time.Minute}})
		l := newBatchLoader("v:")
		l.value = func(k string) (string, bool) { return "v:" + k, !strings.HasSuffix(k, "0") }
		keys := keyRange("k", 0, 50)
		input := append(slices.Clone(keys), keys[:10]...) // repeats
		for round := range 2 {
			got, err := cache.GetOrLoadMany(ctx, c, input, l.load)
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			if len(got) != 45 {
				t.Errorf("round %d: %d values, want 45", round, len(got))
			}
			for _, k := range keys {
				v, ok := got[k]
				switch {
				case strings.HasSuffix(k, "0") && ok:
					t.Errorf("round %d: %s = %q, want not found", round, k, v)
				case !strings.HasSuffix(k, "0") && v != "v:"+k:
					t.Errorf("round %d: %s = %q, want %q", round, k, v, "v:"+k)
				}
			}
		}
		calls, perKey := l.loaded()
		if len(calls) != 1 || len(calls[0]) != 50 {
			t.Errorf("loader calls %v, want one with the 50 keys", calls)
		}
		for k, n := range perKey {
			if n != 1 {
				t.Errorf("%s loaded %d times", k, n)
			}
		}
		if st := c.Stats(); st.Loads != 1 || st.Misses != 50 || st.Hits != 50 {
			t.Errorf("stats %+v: want 1 load, 50 misses, 50 hits", st)
		}
		if _, err := cache.Get[string](ctx, c, "k10"); !errors.Is(err, loader.ErrNotFound) {
			t.Errorf("Get(k10) = %v, want the negative entry's ErrNotFound", err)
		}
	})
}

// Bad input is refused before any server call; no keys is an empty map
// without a server call.
func TestGetOrLoadMany_badInput(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	rc := s.NewClient()
	t.Cleanup(func() { _ = rc.Close() })
	rec := record(rc)
	c := newCacheOn(t, rc, nil)
	l := newBatchLoader("v:")
	tests := []struct {
		name string
		c    *cache.Cache
		keys []string
		load func(context.Context, []string) (map[string]string, error)
		want string // in the error; "" for none
	}{
		{name: "nil cache", c: nil, keys: []string{"a"}, load: l.load, want: "nil *Cache"},
		{name: "nil loader", c: c, keys: []string{"a"}, load: nil, want: "nil loader"},
		{name: "empty key", c: c, keys: []string{"a", "b", ""}, load: l.load, want: "empty key at index 2"},
		{name: "no keys", c: c, keys: nil, load: l.load},
		{name: "empty slice", c: c, keys: []string{}, load: l.load},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec.reset()
			got, err := cache.GetOrLoadMany(ctx, tt.c, tt.keys, tt.load)
			switch {
			case tt.want == "" && (err != nil || got == nil || len(got) != 0):
				t.Errorf("got %v, %v; want an empty map", got, err)
			case tt.want != "" && (!errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), tt.want) || got != nil):
				t.Errorf("got %v, %v; want ErrInvalid with %q", got, err, tt.want)
			}
			if cmds := rec.reset(); len(cmds) != 0 {
				t.Errorf("server calls %q, want none", cmds)
			}
		})
	}
	if calls, _ := l.loaded(); len(calls) != 0 {
		t.Errorf("loader called: %v", calls)
	}
	closed := newCacheOn(t, rc, nil)
	closed.Close()
	if _, err := cache.GetOrLoadMany(ctx, closed, []string{"a"}, l.load); !errors.Is(err, cache.ErrClosed) {
		t.Errorf("closed cache: %v, want ErrClosed", err)
	}
}

// Four caches with clients of their own (standing in for processes) × 8
// goroutines, each asking for an overlapping window of keys, some with
// GetOrLoad: every key is loaded once in all, and each loader call of a
// batch gets many keys.
func TestGetOrLoadMany_oneLoadPerKey_clients(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		l := newBatchLoader("v:")
		var caches []*cache.Cache
		for range 4 {
			rc := s.NewClient()
			t.Cleanup(func() { _ = rc.Close() })
			caches = append(caches, newCacheOn(t, rc, &cache.Options{Namespace: ns, WaitTimeout: 30 * time.Second}))
		}
		all := keyRange("k", 0, 300)
		asked := map[string]bool{}
		for i := range 4 * 8 {
			from := i * 37 % 200
			for _, k := range all[from : from+100] {
				asked[k] = true
			}
		}
		release := make(chan struct{})
		errs := make(chan error, 64)
		var wg sync.WaitGroup
		for ci, c := range caches {
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-release
					from := (ci*8 + g) * 37 % 200
					want := all[from : from+100]
					if g == 7 { // a GetOrLoad caller among them
						for _, k := range want[:10] {
							v, err := cache.GetOrLoad(ctx, c, k, typedOneLoader(l, k))
							if err != nil || v != "v:"+k {
								errs <- fmt.Errorf("GetOrLoad(%s) = %q, %v", k, v, err)
								return
							}
						}
						return
					}
					got, err := cache.GetOrLoadMany(ctx, c, want, l.load)
					if err != nil {
						errs <- err
						return
					}
					for _, k := range want {
						if got[k] != "v:"+k {
							errs <- fmt.Errorf("%s = %q", k, got[k])
							return
						}
					}
				}()
			}
		}
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		calls, perKey := l.loaded()
		for k, n := range perKey {
			if n != 1 {
				t.Errorf("%s loaded %d times, want once", k, n)
			}
		}
		if len(perKey) != len(asked) {
			t.Errorf("%d keys loaded, want %d", len(perKey), len(asked))
		}
		sizes := make([]int, len(calls))
		for i, c := range calls {
			sizes[i] = len(c)
		}
		t.Logf("%d loader calls for %d keys, keys per call %v", len(calls), len(asked), sizes)
	}, manyKinds...)
}

// typedOneLoader is l as GetOrLoad's loader of key.
func typedOneLoader(l *batchLoader, key string) loader.Func[string] {
	return func(ctx context.Context) (string, error) {
		got, err := l.load(ctx, []string{key})
		if err != nil {
			return "", err
		}
		v, ok := got[key]
		if !ok {
			return "", loader.ErrNotFound
		}
		return v, nil
	}
}

// workerMany: G goroutines each ask GetOrLoadMany for an overlapping
// window of KEYS keys; the loader counts each key it loads in a hash
// (HINCRBY, so every process counts) and its calls with INCR.
func workerMany() int {
	c, rc := workerCache()
	defer rc.Close()
	defer c.Close()
	g, n, counts, calls := envInt("G"), envInt("KEYS"), env("COUNTS"), env("CALLS")
	proc := envInt("PROC")
	all := keyRange("k", 0, n)
	load := func(ctx context.Context, keys []string) (map[string]string, error) {
		pipe := rc.Pipeline()
		pipe.Incr(ctx, calls)
		for _, k := range keys {
			pipe.HIncrBy(ctx, counts, k, 1)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err
		}
		time.Sleep(20 * time.Millisecond) // the expensive query
		out := make(map[string]string, len(keys))
		for _, k := range keys {
			out[k] = "v:" + k
		}
		return out, nil
	}
	if err := ready(rc); err != nil {
		return fail(err)
	}
	ctx := context.Background()
	errs := make(chan error, g)
	var wg sync.WaitGroup
	for i := range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			from := (proc*g + i) * 53 % (n / 2)
			want := all[from : from+n/2]
			got, err := cache.GetOrLoadMany(ctx, c, want, load)
			if err == nil {
				for _, k := range want {
					if got[k] != "v:"+k {
						err = fmt.Errorf("%s = %q", k, got[k])
						break
					}
				}
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

// The decisive one: 4 OS processes × 16 goroutines with overlapping key
// sets: every key loaded once across all of them.
func TestGetOrLoadMany_oneLoadPerKey_processes(t *testing.T) {
	for _, kind := range manyKinds {
		t.Run(string(kind), func(t *testing.T) {
			s := redistest.Shared(t, kind)
			counts, calls := redistest.Key(t, "counts"), redistest.Key(t, "calls")
			ns := namespace(t)
			p := &procs{t: t, s: s, rc: s.Client(t), goList: redistest.Key(t, "go")}
			base := []string{"CACHETEST_GO=" + p.goList, "CACHETEST_TTL=1m", "CACHETEST_STALE=0s", "CACHETEST_LOCKTTL=5s",
				"CACHETEST_NS=" + ns, "CACHETEST_COUNTS=" + counts, "CACHETEST_CALLS=" + calls, "CACHETEST_G=16", "CACHETEST_KEYS=400"}
			for i := range 4 {
				p.ps = append(p.ps, redistest.Spawn(t, s, "many", append(base, fmt.Sprintf("CACHETEST_PROC=%d", i))...))
			}
			ctx := testCtx(t)
			for i, w := range p.ps {
				if line := redistest.Recv(t, ctx, w.Lines(), "worker ready"); line != "ready" {
					t.Fatalf("worker %d: %q", i, line)
				}
			}
			p.start()
			out := p.wait()
			perKey, err := p.rc.HGetAll(ctx, counts).Result()
			if err != nil {
				t.Fatal(err)
			}
			asked := map[int]bool{}
			for i := range 4 * 16 {
				from := i * 53 % 200
				for k := from; k < from+200; k++ {
					asked[k] = true
				}
			}
			if len(perKey) != len(asked) {
				t.Errorf("%d keys loaded, want %d", len(perKey), len(asked))
			}
			for k, n := range perKey {
				if n != "1" {
					t.Errorf("%s loaded %s times, want once", k, n)
				}
			}
			n, _ := p.rc.Get(ctx, calls).Int()
			t.Logf("%d loader calls for 400 keys in 4 processes × 16 callers; %v", n, out)
		})
	}
}

// Stale values are served at once while one background batch, in one of
// the processes, refreshes them with one loader call.
func TestGetOrLoadMany_staleRefreshedOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		clk := newClock()
		opts := &cache.Options{Namespace: namespace(t), Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute}, Now: clk.Now}
		a, rc := newCache(t, s, opts)
		b := newCacheOn(t, rc, opts)
		keys := keyRange("s", 0, 20)
		if _, err := cache.GetOrLoadMany(ctx, a, keys, newBatchLoader("v1:").load); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Minute)
		l := newBatchLoader("v2:")
		l.gate, l.entered = make(chan struct{}), make(chan []string, 4)
		for _, c := range []*cache.Cache{b, a} { // a's refresh finds b's locks held
			got, err := cache.GetOrLoadMany(ctx, c, keys, l.load)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if got[k] != "v1:"+k {
					t.Fatalf("%s = %q, want the stale v1 at once", k, got[k])
				}
			}
			if c == b {
				if in := redistest.Recv(t, ctx, l.entered, "the refresh"); len(in) != len(keys) {
					t.Fatalf("refresh loads %v, want all %d keys in one call", in, len(keys))
				}
			}
		}
		served := a.Stats().Add(b.Stats())
		redistest.WaitFor(t, ctx, "a's refresh attempt", func() bool { return a.Stats().LockContention >= uint64(len(keys)) })
		close(l.gate)
		redistest.WaitFor(t, ctx, "the refresh to end", func() bool {
			for _, k := range keys {
				if cache.RefreshRunning(b, k) {
					return false
				}
			}
			return true
		})
		got, err := cache.GetOrLoadMany(ctx, a, keys, l.load)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if got[k] != "v2:"+k {
				t.Errorf("%s = %q after the refresh, want v2", k, got[k])
			}
		}
		if calls, _ := l.loaded(); len(calls) != 1 {
			t.Errorf("loader calls %v, want one refresh", calls)
		}
		if st := a.Stats().Add(b.Stats()); st.Refreshes != uint64(len(keys)) || served.StaleHits != uint64(2*len(keys)) {
			t.Errorf("stats %+v (%d stale hits served): want %d refreshes and %d stale hits", st, served.StaleHits, len(keys), 2*len(keys))
		}
	}, manyKinds...)
}

// A loader error fails the keys of that call (a *BatchError naming each)
// and is not stored; the other keys are returned. A panic is a
// *loader.PanicError; a value above MaxValueSize fails its key alone.
func TestGetOrLoadMany_errors(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newCache(t, s, &cache.Options{MaxValueSize: 64})
		if err := cache.Set(ctx, c, "cached", "here"); err != nil {
			t.Fatal(err)
		}
		boom := errors.New("database down")
		tests := []struct {
			name   string
			load   func(context.Context, []string) (map[string]string, error)
			check  func(error) bool
			failed []string
		}{
			{"loader error", func(context.Context, []string) (map[string]string, error) { return nil, boom },
				func(err error) bool { return errors.Is(err, boom) }, []string{"e1", "e2"}},
			{"panic", func(context.Context, []string) (map[string]string, error) { panic("bad row") },
				func(err error) bool {
					var pe *loader.PanicError
					return errors.As(err, &pe) && pe.Value == "bad row"
				}, []string{"e1", "e2"}},
			{"too large", func(_ context.Context, keys []string) (map[string]string, error) {
				return map[string]string{"e1": strings.Repeat("x", 100), "e2": "small"}, nil
			}, func(err error) bool { return errors.Is(err, cache.ErrValueTooLarge) }, []string{"e1"}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got, err := cache.GetOrLoadMany(ctx, c, []string{"cached", "e1", "e2"}, tt.load)
				var be *cache.BatchError
				if !errors.As(err, &be) || !tt.check(err) {
					t.Fatalf("err = %v, want a *BatchError matching", err)
				}
				if failed := slices.Sorted(maps.Keys(be.Errors)); !slices.Equal(failed, tt.failed) {
					t.Errorf("failed keys %v, want %v", failed, tt.failed)
				}
				if got["cached"] != "here" {
					t.Errorf("cached = %q, want it despite the failure", got["cached"])
				}
				for _, k := range tt.failed {
					if _, ok := got[k]; ok {
						t.Errorf("%s in the result", k)
					}
					if _, err := cache.Get[string](ctx, c, k); !errors.Is(err, cache.ErrMiss) {
						t.Errorf("Get(%s) = %v: the failure was stored", k, err)
					}
				}
				for _, k := range []string{"e1", "e2"} {
					if err := c.Delete(ctx, k); err != nil {
						t.Fatal(err)
					}
				}
			})
		}
	}, manyKinds...)
}

// Keys another process claimed are waited for (woken by its
// announcement: the poll is a minute), not loaded; this call's loader
// gets the others only.
func TestGetOrLoadMany_waitsForOtherProcess(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		opts := &cache.Options{Namespace: namespace(t), PollInterval: time.Minute, WaitTimeout: time.Minute}
		other, rc := newCache(t, s, opts)
		c := newCacheOn(t, rc, opts)
		gate, entered := make(chan struct{}), make(chan struct{})
		otherDone := make(chan error, 1)
		go func() {
			_, err := cache.GetOrLoad(ctx, other, "k2", func(context.Context) (string, error) {
				close(entered)
				<-gate
				return "from the other", nil
			})
			otherDone <- err
		}()
		redistest.Recv(t, ctx, entered, "the other's load")
		l := newBatchLoader("v:")
		type result struct {
			got map[string]string
			err error
		}
		done := make(chan result, 1)
		go func() {
			got, err := cache.GetOrLoadMany(ctx, c, []string{"k1", "k2", "k3"}, l.load)
			done <- result{got, err}
		}()
		redistest.WaitFor(t, ctx, "the batch to wait", func() bool { return c.Stats().Waits == 1 })
		close(gate)
		r := redistest.Recv(t, ctx, done, "the batch")
		if r.err != nil || r.got["k1"] != "v:k1" || r.got["k2"] != "from the other" || r.got["k3"] != "v:k3" {
			t.Errorf("got %v, %v; want k2 from the other process", r.got, r.err)
		}
		if calls, _ := l.loaded(); len(calls) != 1 || !slices.Equal(calls[0], []string{"k1", "k3"}) {
			t.Errorf("loader calls %v, want one with k1 and k3", calls)
		}
		if err := <-otherDone; err != nil {
			t.Fatal(err)
		}
	}, manyKinds...)
}

// A key claimed by a process that then fails: the waiting batch gets
// ErrRemoteLoad for that key alone.
func TestGetOrLoadMany_remoteFailure(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		c, rc := newCache(t, s, &cache.Options{Namespace: ns, PollInterval: time.Minute, WaitTimeout: time.Minute, Broadcast: true}) // the test publishes on NS:announce
		locks, err := lock.New(rc, nil)
		if err != nil {
			t.Fatal(err)
		}
		claim, err := locks.Obtain(ctx, ns+":{k2}", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		var got map[string]string
		go func() {
			var err error
			got, err = cache.GetOrLoadMany(ctx, c, []string{"k1", "k2"}, newBatchLoader("v:").load)
			done <- err
		}()
		redistest.WaitFor(t, ctx, "the batch to wait", func() bool { return c.Stats().Waits == 1 })
		if err := rc.Publish(ctx, ns+":announce", "e"+ns+":{k2}\x00"+claim.Token()+"\x00no such table").Err(); err != nil {
			t.Fatal(err)
		}
		err = redistest.Recv(t, ctx, done, "the batch")
		var be *cache.BatchError
		if !errors.As(err, &be) || len(be.Errors) != 1 || !errors.Is(be.Errors["k2"], cache.ErrRemoteLoad) || got["k1"] != "v:k1" {
			t.Errorf("got %v, %v; want k1 and k2's ErrRemoteLoad", got, err)
		}
	}, redistest.Redis8, redistest.Cluster)
}

// Within a process GetOrLoad and GetOrLoadMany share one flight per key:
// a batch joins a GetOrLoad's load and the other way round.
func TestGetOrLoadMany_sharesFlightsWithGetOrLoad(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newCache(t, s, nil)

		// A GetOrLoad is loading k1; a batch of k1 and k2 loads k2 only.
		gate, entered := make(chan struct{}), make(chan struct{})
		single := make(chan error, 1)
		go func() {
			_, err := cache.GetOrLoad(ctx, c, "k1", func(context.Context) (string, error) {
				close(entered)
				<-gate
				return "single", nil
			})
			single <- err
		}()
		redistest.Recv(t, ctx, entered, "GetOrLoad's load")
		l := newBatchLoader("batch:")
		done := make(chan map[string]string, 1)
		go func() {
			got, err := cache.GetOrLoadMany(ctx, c, []string{"k1", "k2"}, l.load)
			if err != nil {
				t.Error(err)
			}
			done <- got
		}()
		redistest.WaitFor(t, ctx, "the batch to join", func() bool { return cache.FlightJoined(c, "k1") == 2 })
		close(gate)
		if got := redistest.Recv(t, ctx, done, "the batch"); got["k1"] != "single" || got["k2"] != "batch:k2" {
			t.Errorf("got %v", got)
		}
		if calls, _ := l.loaded(); len(calls) != 1 || !slices.Equal(calls[0], []string{"k2"}) {
			t.Errorf("batch loader calls %v, want [[k2]]", calls)
		}
		if err := <-single; err != nil {
			t.Fatal(err)
		}

		// A batch is loading k3 and k4; a GetOrLoad of k3 joins it.
		l2 := newBatchLoader("batch:")
		l2.gate, l2.entered = make(chan struct{}), make(chan []string, 1)
		batchDone := make(chan error, 1)
		go func() {
			_, err := cache.GetOrLoadMany(ctx, c, []string{"k3", "k4"}, l2.load)
			batchDone <- err
		}()
		redistest.Recv(t, ctx, l2.entered, "the batch load")
		joined := make(chan string, 1)
		go func() {
			v, err := cache.GetOrLoad(ctx, c, "k3", func(context.Context) (string, error) { return "own load", nil })
			if err != nil {
				t.Error(err)
			}
			joined <- v
		}()
		redistest.WaitFor(t, ctx, "GetOrLoad to join", func() bool { return cache.FlightJoined(c, "k3") == 2 })
		close(l2.gate)
		if v := redistest.Recv(t, ctx, joined, "GetOrLoad"); v != "batch:k3" {
			t.Errorf("GetOrLoad(k3) = %q, want the batch's value", v)
		}
		if err := <-batchDone; err != nil {
			t.Fatal(err)
		}
		if st := c.Stats(); st.Coalesced != 2 || st.Waits != 0 || st.Loads != 3 {
			t.Errorf("stats %+v: want 2 coalesced, no wait, 3 loads", st)
		}
	}, manyKinds...)
}

// Read your writes: after Set the batch returns the new value, after
// Delete it loads the key again.
func TestGetOrLoadMany_readYourWrites(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newCache(t, s, nil)
		l := newBatchLoader("v:")
		keys := []string{"a", "b", "c"}
		if _, err := cache.GetOrLoadMany(ctx, c, keys, l.load); err != nil {
			t.Fatal(err)
		}
		if err := cache.Set(ctx, c, "a", "set"); err != nil {
			t.Fatal(err)
		}
		if err := c.Delete(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		l.value = func(k string) (string, bool) { return "again:" + k, true }
		got, err := cache.GetOrLoadMany(ctx, c, keys, l.load)
		if err != nil || got["a"] != "set" || got["b"] != "again:b" || got["c"] != "v:c" {
			t.Errorf("got %v, %v", got, err)
		}
		if calls, _ := l.loaded(); len(calls) != 2 || !slices.Equal(calls[1], []string{"b"}) {
			t.Errorf("loader calls %v, want the second with b only", calls)
		}
	}, manyKinds...)
}

// With the near cache, the second batch is answered in the process: near
// hits, no MGET.
func TestGetOrLoadMany_nearHits(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		rc := s.NewClient()
		t.Cleanup(func() { _ = rc.Close() })
		rec := record(rc)
		c := newCacheOn(t, rc, nearOpts(t))
		redistest.WaitFor(t, ctx, "near cache active", c.NearActive)
		l := newBatchLoader("v:")
		keys := keyRange("n", 0, 30)
		get := func() map[string]string {
			got, err := cache.GetOrLoadMany(ctx, c, keys, l.load)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		get()
		// The loads' own writes are invalidated by the server too, maybe
		// after a read refilled an entry: wait for a call answered
		// entirely in the process.
		redistest.WaitFor(t, ctx, "a batch of near hits", func() bool {
			before := c.Stats().NearHits
			rec.reset()
			got := get()
			return c.Stats().NearHits-before == uint64(len(keys)) && len(got) == len(keys)
		})
		for _, cmd := range rec.reset() {
			if cmd[0] == "mget" || cmd[0] == "get" {
				t.Errorf("a near-hit batch sent %q", cmd)
			}
		}
		if calls, _ := l.loaded(); len(calls) != 1 {
			t.Errorf("loader calls %v, want one", calls)
		}
	}, manyKinds...)
}

// On a Redis Cluster the read is one MGET per hash slot (never CROSSSLOT)
// in one pipeline, and the claims one SET NX each in one pipeline.
func TestGetOrLoadMany_clusterSlots(t *testing.T) {
	s := redistest.Shared(t, redistest.Cluster)
	ctx := testCtx(t)
	rc := s.NewClient()
	t.Cleanup(func() { _ = rc.Close() })
	ns := namespace(t)
	c := newCacheOn(t, rc, &cache.Options{Namespace: ns})
	// 2,000 keys over 16,384 slots: about a hundred slots hold two or more.
	keys := append(keyRange("c", 0, 2000), "{user}:1", "{user}:2", strings.Repeat("long", 50))
	cc := rc.(*redis.ClusterClient)
	slotOf := func(key string) int64 {
		n, err := cc.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	slots := map[int64]bool{}
	for _, k := range keys {
		slots[slotOf(ns+":{"+redisx.Tag(k)+"}")] = true
	}
	rec := record(rc)
	var crossSlot atomic.Int64
	rec.onAfter(func(args []string, err error) {
		if err != nil && strings.Contains(err.Error(), "CROSSSLOT") {
			crossSlot.Add(1)
		}
	})
	l := newBatchLoader("v:")
	got, err := cache.GetOrLoadMany(ctx, c, keys, l.load)
	if err != nil || len(got) != len(keys) {
		t.Fatalf("%d values, %v", len(got), err)
	}
	var mgets, grouped, setnx int
	for _, cmd := range rec.reset() {
		switch cmd[0] {
		case "mget":
			mgets++
			if len(cmd) > 2 {
				grouped++
			}
			first := slotOf(cmd[1])
			for _, k := range cmd[2:] {
				if slotOf(k) != first {
					t.Errorf("MGET %q mixes slots", cmd)
				}
			}
		case "set":
			if slices.Contains(cmd, "NX") || slices.Contains(cmd, "nx") {
				setnx++
			}
		}
	}
	if mgets != len(slots) || grouped == 0 {
		t.Errorf("%d MGETs (%d of several keys) for %d slots; want one per slot", mgets, grouped, len(slots))
	}
	if setnx != len(keys) {
		t.Errorf("%d SETs for %d claims", setnx, len(keys))
	}
	if calls, _ := l.loaded(); len(calls) != 1 {
		t.Errorf("loader calls %d, want 1", len(calls))
	}
	if n := crossSlot.Load(); n > 0 {
		t.Errorf("%d CROSSSLOT errors", n)
	}
	t.Logf("%d keys: %d MGETs (%d of several keys), %d claims", len(keys), mgets, grouped, setnx)
}

// With the server down the batch fails open: one loader call for every
// key, nothing stored.
func TestGetOrLoadMany_failOpen(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		rc, faults := faultyClient(t, s, clientTimeouts{dial: time.Second, write: time.Second, read: time.Second, pool: time.Second})
		c := newCacheOn(t, rc, &cache.Options{FailOpenCooldown: time.Minute})
		if _, err := cache.GetOrLoadMany(ctx, c, []string{"warm"}, newBatchLoader("v:").load); err != nil {
			t.Fatal(err)
		}
		faults.Refuse()
		faults.Reset()
		l := newBatchLoader("open:")
		keys := keyRange("f", 0, 20)
		for round := range 2 { // the first meets the failure, the second the cool-down
			got, err := cache.GetOrLoadMany(ctx, c, keys, l.load)
			if err != nil || len(got) != len(keys) || got["f3"] != "open:f3" {
				t.Fatalf("round %d: %v, %v", round, got, err)
			}
		}
		if calls, _ := l.loaded(); len(calls) != 2 || len(calls[0]) != len(keys) {
			t.Errorf("loader calls %v, want one per round with every key", calls)
		}
		if st := c.Stats(); st.FailOpenLoads != uint64(2*len(keys)) {
			t.Errorf("stats %+v: want %d fail-open loads", st, 2*len(keys))
		}
	}, redistest.Redis8, redistest.Cluster)
}

// A key another process claims between this call's read and its claim:
// the claim's reply (SET NX GET) names that claim, and the call waits for
// it without reading the key again and without loading it.
func TestGetOrLoadMany_claimTakenMeanwhile(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		rc := s.NewClient()
		t.Cleanup(func() { _ = rc.Close() })
		rec := record(rc)
		c := newCacheOn(t, rc, &cache.Options{Namespace: ns, PollInterval: time.Minute, WaitTimeout: time.Minute, Broadcast: true}) // the test publishes on NS:announce
		other := s.Client(t)
		locks, err := lock.New(other, nil)
		if err != nil {
			t.Fatal(err)
		}
		claims := make(chan *lock.Lock, 1)
		rec.onBefore(func(args []string) {
			if args[0] == "set" && len(args) > 1 && args[1] == ns+":{k2}" && slices.Contains(args, "NX") && len(claims) == 0 {
				l, err := locks.Obtain(ctx, ns+":{k2}", time.Minute) // the other process is first
				if err != nil {
					t.Error(err)
				}
				claims <- l
			}
		})
		// Subscribed before the batch reads: it then has no reason to
		// read k2 again once its subscription is confirmed.
		redistest.WaitFor(t, ctx, "c's subscription", func() bool { return numSub(t, ctx, other, ns+":announce") == 1 })
		l := newBatchLoader("v:")
		done := make(chan error, 1)
		var got map[string]string
		go func() {
			var err error
			got, err = cache.GetOrLoadMany(ctx, c, []string{"k1", "k2"}, l.load)
			done <- err
		}()
		claim := redistest.Recv(t, ctx, claims, "the other's claim")
		redistest.WaitFor(t, ctx, "the batch to wait", func() bool { return c.Stats().Waits == 1 })
		rec.onBefore(nil)
		if err := other.Publish(ctx, ns+":announce", "e"+ns+":{k2}\x00"+claim.Token()+"\x00it failed").Err(); err != nil {
			t.Fatal(err)
		}
		err = redistest.Recv(t, ctx, done, "the batch")
		var be *cache.BatchError
		if !errors.As(err, &be) || len(be.Errors) != 1 || !errors.Is(be.Errors["k2"], cache.ErrRemoteLoad) || got["k1"] != "v:k1" {
			t.Errorf("got %v, %v; want k1 and k2's ErrRemoteLoad", got, err)
		}
		if calls, _ := l.loaded(); len(calls) != 1 || !slices.Equal(calls[0], []string{"k1"}) {
			t.Errorf("loader calls %v, want [[k1]]", calls)
		}
		for _, cmd := range rec.reset() {
			if cmd[0] == "get" && cmd[1] == ns+":{k2}" {
				t.Errorf("k2 read again: %q", cmd)
			}
		}
	}, manyKinds...)
}

// No stale sets: a Delete during the batch's load wins; the batch's
// callers still get what it loaded, and the key stays empty.
func TestGetOrLoadMany_deleteDuringLoad(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newCache(t, s, nil)
		l := newBatchLoader("old:")
		l.gate, l.entered = make(chan struct{}), make(chan []string, 1)
		done := make(chan map[string]string, 1)
		go func() {
			got, err := cache.GetOrLoadMany(ctx, c, []string{"d1", "d2"}, l.load)
			if err != nil {
				t.Error(err)
			}
			done <- got
		}()
		redistest.Recv(t, ctx, l.entered, "the load")
		if err := c.Delete(ctx, "d1"); err != nil {
			t.Fatal(err)
		}
		close(l.gate)
		if got := redistest.Recv(t, ctx, done, "the batch"); got["d1"] != "old:d1" || got["d2"] != "old:d2" {
			t.Errorf("got %v", got)
		}
		if _, err := cache.Get[string](ctx, c, "d1"); !errors.Is(err, cache.ErrMiss) {
			t.Errorf("Get(d1) after the Delete = %v, want ErrMiss: the load wrote over the Delete", err)
		}
		if v, err := cache.Get[string](ctx, c, "d2"); err != nil || v != "old:d2" {
			t.Errorf("Get(d2) = %q, %v", v, err)
		}
		if st := c.Stats(); st.WritesSkipped != 1 {
			t.Errorf("stats %+v: want 1 write skipped", st)
		}
	}, manyKinds...)
}

// A process waiting with GetOrLoad for a key a batch claimed is woken by
// the batch's announcement (the poll is a minute) and takes its value.
func TestGetOrLoadMany_announcesToWaiters(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		opts := &cache.Options{Namespace: namespace(t), PollInterval: time.Minute, WaitTimeout: time.Minute}
		c, rc := newCache(t, s, opts)
		other := newCacheOn(t, rc, opts)
		l := newBatchLoader("batch:")
		l.gate, l.entered = make(chan struct{}), make(chan []string, 1)
		done := make(chan error, 1)
		go func() {
			_, err := cache.GetOrLoadMany(ctx, c, []string{"a1", "a2"}, l.load)
			done <- err
		}()
		redistest.Recv(t, ctx, l.entered, "the batch load")
		got := make(chan string, 1)
		go func() {
			v, err := cache.GetOrLoad(ctx, other, "a2", func(context.Context) (string, error) { return "own", nil })
			if err != nil {
				t.Error(err)
			}
			got <- v
		}()
		redistest.WaitFor(t, ctx, "the other process to wait", func() bool { return other.Stats().Waits == 1 })
		close(l.gate)
		if v := redistest.Recv(t, ctx, got, "the waiter"); v != "batch:a2" {
			t.Errorf("waiter got %q, want the batch's value", v)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if st := other.Stats(); st.Loads != 0 || st.WaitTimeouts != 0 {
			t.Errorf("waiter stats %+v: want no load", st)
		}
	}, manyKinds...)
}

// A stale key the refresh does not find any more is ended (deleted, with
// Expiry.Negative 0) rather than served and refreshed again; the others are
// replaced.
func TestGetOrLoadMany_staleNotFound(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		clk := newClock()
		c, _ := newCache(t, s, &cache.Options{Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute}, Now: clk.Now})
		keys := []string{"g0", "g1"}
		if _, err := cache.GetOrLoadMany(ctx, c, keys, newBatchLoader("v1:").load); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Minute)
		l := newBatchLoader("v2:")
		l.value = func(k string) (string, bool) { return "v2:" + k, k != "g1" } // g1 is gone
		got, err := cache.GetOrLoadMany(ctx, c, keys, l.load)
		if err != nil || got["g0"] != "v1:g0" || got["g1"] != "v1:g1" {
			t.Fatalf("got %v, %v; want both stale", got, err)
		}
		redistest.WaitFor(t, ctx, "the refresh to end", func() bool {
			return !cache.RefreshRunning(c, "g0") && !cache.RefreshRunning(c, "g1")
		})
		if v, err := cache.Get[string](ctx, c, "g0"); err != nil || v != "v2:g0" {
			t.Errorf("Get(g0) = %q, %v; want the refreshed value", v, err)
		}
		if _, err := cache.Get[string](ctx, c, "g1"); !errors.Is(err, cache.ErrMiss) {
			t.Errorf("Get(g1) = %v; want ErrMiss: the refresh found it gone", err)
		}
		if calls, _ := l.loaded(); len(calls) != 1 || len(calls[0]) != 2 {
			t.Errorf("loader calls %v, want one refresh of both", calls)
		}
	}, manyKinds...)
}

// Read your writes through a joined flight: a batch that starts after a
// Delete in another process joins this process's flight of the key, which
// began before the Delete; it must not take that flight's older value,
// but read and load the key again.
func TestGetOrLoadMany_joinedFlightOlderThanDelete(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		opts := &cache.Options{Namespace: namespace(t)}
		c, rc := newCache(t, s, opts)
		other := newCacheOn(t, rc, opts)
		gate, entered := make(chan struct{}), make(chan struct{})
		single := make(chan string, 1)
		go func() {
			v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) {
				close(entered)
				<-gate
				return "before the delete", nil
			})
			if err != nil {
				t.Error(err)
			}
			single <- v
		}()
		redistest.Recv(t, ctx, entered, "the first load")
		if err := other.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		l := newBatchLoader("after:")
		done := make(chan map[string]string, 1)
		go func() {
			got, err := cache.GetOrLoadMany(ctx, c, []string{"k"}, l.load)
			if err != nil {
				t.Error(err)
			}
			done <- got
		}()
		redistest.WaitFor(t, ctx, "the batch to join the flight", func() bool { return cache.FlightJoined(c, "k") == 2 })
		close(gate)
		if v := redistest.Recv(t, ctx, single, "the first caller"); v != "before the delete" {
			t.Errorf("first caller got %q", v)
		}
		if got := redistest.Recv(t, ctx, done, "the batch"); got["k"] != "after:k" {
			t.Errorf("batch got %q, want a value loaded after the Delete", got["k"])
		}
	}, manyKinds...)
}

// As a least-privilege ACL user: with the cache permissions of
// docs/permissions.md and +mget the batch is one loader call; without +mget every key goes the
// per-key way (correct, not batched), never a refusal or a timeout.
func TestGetOrLoadMany_acl(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		for _, mget := range []bool{true, false} {
			perms := redistest.CachePerms(s.Kind, ns)
			if mget {
				perms = append(perms, "+mget")
			}
			u := s.User(t, perms...)
			c := aclCache(t, u, ns, cache.Options{})
			l := newBatchLoader(fmt.Sprintf("%v:", mget))
			keys := keyRange(fmt.Sprintf("acl%v", mget), 0, 5)
			got, err := cache.GetOrLoadMany(ctx, c, keys, l.load)
			if err != nil || len(got) != len(keys) {
				t.Fatalf("+mget %v: %v, %v", mget, got, err)
			}
			calls, _ := l.loaded()
			if want := map[bool]int{true: 1, false: len(keys)}[mget]; len(calls) != want {
				t.Errorf("+mget %v: %d loader calls, want %d", mget, len(calls), want)
			}
			if _, err := cache.GetOrLoadMany(ctx, c, keys, l.load); err != nil {
				t.Errorf("+mget %v, hits: %v", mget, err)
			}
		}
	}, manyKinds...)
}
