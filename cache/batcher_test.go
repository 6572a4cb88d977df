package cache_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
)

// staleFleet is n Caches (processes) on one server, in one namespace,
// with one clock, each with a Batcher over the same loader l, and keys
// stored as "v1:"+key, made stale.
type staleFleet struct {
	caches   []*cache.Cache
	batchers []*cache.Batcher[string]
	l        *batchLoader
	ns       string
}

func newStaleFleet(t *testing.T, s *redistest.Server, n int, keys []string, bo *cache.BatcherOptions, with ...func(*cache.Options)) *staleFleet {
	t.Helper()
	ctx := testCtx(t)
	clk := newClock()
	f := &staleFleet{l: newBatchLoader("v2:"), ns: namespace(t)}
	opts := &cache.Options{Namespace: f.ns, Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute}, Now: clk.Now}
	for _, w := range with {
		w(opts)
	}
	rc := s.Client(t)
	for range n {
		c := newCacheOn(t, rc, opts)
		b, err := cache.NewBatcher(c, f.l.load, bo)
		if err != nil {
			t.Fatal(err)
		}
		f.caches, f.batchers = append(f.caches, c), append(f.batchers, b)
	}
	for _, k := range keys {
		if err := cache.Set(ctx, f.caches[0], k, "v1:"+k); err != nil {
			t.Fatal(err)
		}
	}
	clk.Advance(2 * time.Minute)
	return f
}

// shut holds f's loader until open is called (at cleanup at the latest,
// so that a failed test leaves no loader blocked).
func (f *staleFleet) shut(t *testing.T) (open func()) {
	t.Helper()
	f.l.gate = make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(f.l.gate) }) }
	t.Cleanup(open)
	return open
}

// getInRounds has each Batcher i of f Get the keys keysOf(i), missing,
// with its rounds' windows held open until joined loads (of every
// process) wait in a round, and checks every value.
func (f *staleFleet) getInRounds(t *testing.T, ctx context.Context, keysOf func(i int) []string, joined int) {
	t.Helper()
	var ends []func()
	for _, b := range f.batchers {
		ends = append(ends, cache.HoldBatcherWindows(b))
	}
	errs := make(chan error, 1024)
	var wg sync.WaitGroup
	for i, b := range f.batchers {
		for _, k := range keysOf(i) {
			wg.Go(func() {
				if v, err := b.Get(ctx, k); err != nil || v != "v2:"+k {
					errs <- fmt.Errorf("%s = %q, %v; want v2", k, v, err)
				}
			})
		}
	}
	redistest.WaitFor(t, ctx, "every key's load in a round", func() bool {
		var n int64
		for _, b := range f.batchers {
			n += cache.BatcherLoadsJoined(b)
		}
		return n >= int64(joined)
	})
	for _, end := range ends {
		end()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// checkRounds checks that f's loader loaded each of keys once in the
// fleet, in at most bound calls of at most maxKeys keys, and returns the
// calls.
func (f *staleFleet) checkRounds(t *testing.T, keys []string, bound, maxKeys int) [][]string {
	t.Helper()
	calls, perKey := f.l.loaded()
	for _, k := range keys {
		if perKey[k] != 1 {
			t.Errorf("%s loaded %d times in the fleet, want 1", k, perKey[k])
		}
	}
	if len(calls) > bound {
		t.Errorf("%d loader calls, want at most %d: %v", len(calls), bound, calls)
	}
	for _, c := range calls {
		if len(c) > maxKeys {
			t.Errorf("a loader call with %d keys, above MaxKeys %d", len(c), maxKeys)
		}
	}
	return calls
}

// waitRefreshed waits until no Cache of f refreshes a key of keys.
func (f *staleFleet) waitRefreshed(t *testing.T, ctx context.Context, keys []string) {
	t.Helper()
	redistest.WaitFor(t, ctx, "the refreshes to end", func() bool {
		for _, c := range f.caches {
			for _, k := range keys {
				if cache.RefreshRunning(c, k) {
					return false
				}
			}
		}
		return true
	})
}

// Three processes each with a Batcher over the same loader read 60 stale
// keys at once (one with GetMany, two with a Get per key): callers are
// served the stale values without waiting for the loader (held shut
// throughout), every key is refreshed once in the fleet, and the loader
// is called at most 3 × ceil(60/MaxKeys) times (each process sends the
// keys it claimed in rounds of MaxKeys, the windows held open until every
// claim is made), each call with at most MaxKeys keys.
func TestBatcher_refreshOncePerFleet(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		const procs, maxKeys = 3, 20
		keys := keyRange("b", 0, 60)
		f := newStaleFleet(t, s, procs, keys, &cache.BatcherOptions{MaxKeys: maxKeys})
		open := f.shut(t)
		var ends []func()
		for _, b := range f.batchers {
			ends = append(ends, cache.HoldBatcherWindows(b))
		}

		errs := make(chan error, procs*len(keys))
		var wg sync.WaitGroup
		check := func(k, v string, err error) {
			if err != nil || v != "v1:"+k {
				errs <- fmt.Errorf("%s = %q, %v: want the stale v1 at once", k, v, err)
			}
		}
		for p, b := range f.batchers {
			if p == 0 {
				wg.Go(func() {
					got, err := b.GetMany(ctx, keys)
					for _, k := range keys {
						check(k, got[k], err)
					}
				})
				continue
			}
			for _, k := range keys {
				wg.Go(func() {
					v, err := b.Get(ctx, k)
					check(k, v, err)
				})
			}
		}
		wg.Wait() // every caller served while the loader is shut
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		redistest.WaitFor(t, ctx, "every process's claims", func() bool {
			for _, b := range f.batchers {
				if cache.BatcherTried(b) < int64(len(keys)) {
					return false
				}
			}
			return true
		})
		for _, end := range ends {
			end()
		}
		open()
		f.waitRefreshed(t, ctx, keys)

		calls := f.checkRounds(t, keys, procs*((len(keys)+maxKeys-1)/maxKeys), maxKeys)
		t.Logf("%d loader calls for %d keys in %d processes", len(calls), len(keys), procs)
		var st cache.Stats
		for _, c := range f.caches {
			st = st.Add(c.Stats())
		}
		if st.Refreshes != uint64(len(keys)) {
			t.Errorf("%d refreshes counted, want %d", st.Refreshes, len(keys))
		}
		for _, k := range keys {
			if v, err := f.batchers[1].Get(ctx, k); err != nil || v != "v2:"+k {
				t.Errorf("%s = %q, %v after the refresh, want v2", k, v, err)
			}
		}
	}, manyKinds...)
}

// A round that holds MaxKeys keys goes to the loader at once, its window
// still open; the keys that come after open the next round.
func TestBatcher_fullRoundBeforeWindow(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		keys := keyRange("f", 0, 5)
		f := newStaleFleet(t, s, 1, keys, &cache.BatcherOptions{MaxKeys: 5, Window: time.Second})
		f.l.entered = make(chan []string, 4)
		b := f.batchers[0]
		end := cache.HoldBatcherWindows(b)
		t.Cleanup(end)
		for _, k := range keys {
			go func() { _, _ = b.Get(ctx, k) }()
		}
		if in := redistest.Recv(t, ctx, f.l.entered, "the full round"); len(in) != len(keys) {
			t.Fatalf("loader called with %v, want the %d keys of the full round", in, len(keys))
		}
		f.waitRefreshed(t, ctx, keys)
		for _, k := range keys {
			if v, err := b.Get(ctx, k); err != nil || v != "v2:"+k {
				t.Errorf("%s = %q, %v, want v2 refreshed by the full round", k, v, err)
			}
		}
	}, manyKinds...)
}

// A caller is served the stale value while the round that refreshes it
// is in the loader, and the next caller after the round gets the new one.
func TestBatcher_callersDoNotWait(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		keys := keyRange("w", 0, 3)
		f := newStaleFleet(t, s, 1, keys, nil)
		open := f.shut(t)
		f.l.entered = make(chan []string, 4)
		b := f.batchers[0]
		end := cache.HoldBatcherWindows(b) // one round for the three
		t.Cleanup(end)
		for _, k := range keys {
			if v, err := b.Get(ctx, k); err != nil || v != "v1:"+k {
				t.Fatalf("%s = %q, %v: want the stale v1", k, v, err)
			}
		}
		redistest.WaitFor(t, ctx, "the claims", func() bool { return cache.BatcherTried(b) == int64(len(keys)) })
		end()
		in := redistest.Recv(t, ctx, f.l.entered, "the round's load")
		got, err := b.GetMany(ctx, keys) // the loader still held: served stale
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if got[k] != "v1:"+k {
				t.Errorf("%s = %q while the round loads, want the stale v1", k, got[k])
			}
		}
		open()
		f.waitRefreshed(t, ctx, keys)
		got, err = b.GetMany(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if got[k] != "v2:"+k {
				t.Errorf("%s = %q after the round, want v2", k, got[k])
			}
		}
		if calls, _ := f.l.loaded(); len(calls) != 1 {
			t.Errorf("loader calls %v (first %v), want one round", calls, in)
		}
	}, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// Close with a round open abandons it: nothing is loaded, the keys'
// rebuild locks are freed, and no goroutine of the round is left.
func TestBatcher_closeAbandonsRound(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		keys := keyRange("c", 0, 10)
		f := newStaleFleet(t, s, 1, keys, nil)
		b, c := f.batchers[0], f.caches[0]
		t.Cleanup(cache.HoldBatcherWindows(b))
		for _, k := range keys {
			if _, err := b.Get(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		redistest.WaitFor(t, ctx, "the claims", func() bool { return cache.BatcherTried(b) == int64(len(keys)) })
		rc := s.Client(t)
		for _, k := range keys {
			if n, err := rc.Exists(ctx, valueKey(f.ns, k)+":lock").Result(); err != nil || n != 1 {
				t.Fatalf("rebuild lock of %s: %d, %v; want it held by the open round", k, n, err)
			}
		}
		c.Close()
		for _, k := range keys {
			if n, err := rc.Exists(ctx, valueKey(f.ns, k)+":lock").Result(); err != nil || n != 0 {
				t.Errorf("rebuild lock of %s after Close: %d, %v; want it freed", k, n, err)
			}
		}
		if calls, _ := f.l.loaded(); len(calls) != 0 {
			t.Errorf("loader calls %v: an abandoned round loaded", calls)
		}
		if err := goleak.Find(); err != nil && strings.Contains(err.Error(), "refreshQueue") {
			t.Errorf("a goroutine of a round outlived Close: %v", err)
		}
		if _, err := b.Get(ctx, keys[0]); !errors.Is(err, cache.ErrClosed) {
			t.Errorf("Get after Close: %v, want ErrClosed", err)
		}
	}, redistest.Redis8, redistest.Valkey, redistest.Miniredis)
}

// Bad input is refused before any server call, naming the problem.
func TestNewBatcher_badInput(t *testing.T) {
	rc, rec := deadClient(t)
	c, err := cache.New(rc, &cache.Options{LockTTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	load := newBatchLoader("v:").load
	tests := []struct {
		name string
		c    *cache.Cache
		load func(context.Context, []string) (map[string]string, error)
		opts *cache.BatcherOptions
		want string
	}{
		{name: "nil cache", load: load, want: "nil *Cache"},
		{name: "nil loader", c: c, want: "nil loader"},
		{name: "negative window", c: c, load: load, opts: &cache.BatcherOptions{Window: -time.Millisecond}, want: "Window -1ms is negative"},
		{name: "negative max keys", c: c, load: load, opts: &cache.BatcherOptions{MaxKeys: -1}, want: "MaxKeys -1 is negative"},
		{name: "window of LockTTL/3", c: c, load: load, opts: &cache.BatcherOptions{Window: time.Second}, want: "not below a third of LockTTL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := cache.NewBatcher(tt.c, tt.load, tt.opts)
			if !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), tt.want) || b != nil {
				t.Errorf("NewBatcher: %v, %v; want ErrInvalid saying %q", b, err, tt.want)
			}
		})
	}
	var nilB *cache.Batcher[string]
	if _, err := nilB.Get(context.Background(), "k"); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("Get of a nil Batcher: %v, want ErrInvalid", err)
	}
	if cmds := rec.reset(); len(cmds) != 0 {
		t.Errorf("bad input sent %v", cmds)
	}
}

// GetMany loads the missing keys MaxKeys at a time.
func TestBatcher_GetMany_maxKeys(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newCache(t, s, nil)
		l := newBatchLoader("v:")
		b, err := cache.NewBatcher(c, l.load, &cache.BatcherOptions{MaxKeys: 4})
		if err != nil {
			t.Fatal(err)
		}
		keys := keyRange("m", 0, 10)
		got, err := b.GetMany(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if got[k] != "v:"+k {
				t.Errorf("%s = %q, want v:%s", k, got[k], k)
			}
		}
		calls, _ := l.loaded()
		if len(calls) != 3 {
			t.Errorf("loader calls %v, want 3 of at most 4 keys", calls)
		}
		for _, call := range calls {
			if len(call) > 4 {
				t.Errorf("a loader call with %d keys, above MaxKeys 4", len(call))
			}
		}
	}, redistest.Redis8, redistest.Cluster)
}

// A key whose rebuild lock is lost while its round loads, and that is
// written meanwhile (a Set after the lock expired), keeps what was
// written: the round's write is conditional on the stale value it read.
func TestBatcher_lostLockNotWritten(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		keys := keyRange("l", 0, 2)
		f := newStaleFleet(t, s, 1, keys, nil)
		open := f.shut(t)
		f.l.entered = make(chan []string, 4)
		b, c := f.batchers[0], f.caches[0]
		end := cache.HoldBatcherWindows(b)
		t.Cleanup(end)
		for _, k := range keys {
			if _, err := b.Get(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		redistest.WaitFor(t, ctx, "the claims", func() bool { return cache.BatcherTried(b) == int64(len(keys)) })
		end()
		redistest.Recv(t, ctx, f.l.entered, "the round's load")
		rc := s.Client(t)
		lost := keys[0]
		if err := rc.Del(ctx, valueKey(f.ns, lost)+":lock").Err(); err != nil { // as if it expired
			t.Fatal(err)
		}
		if err := cache.Set(ctx, c, lost, "set meanwhile"); err != nil {
			t.Fatal(err)
		}
		open()
		f.waitRefreshed(t, ctx, keys)
		want := map[string]string{lost: "set meanwhile", keys[1]: "v2:" + keys[1]}
		for k, w := range want {
			if v, err := b.Get(ctx, k); err != nil || v != w {
				t.Errorf("%s = %q, %v; want %q", k, v, err, w)
			}
		}
	}, manyKinds...)
}

// Three processes each Get 30 missing keys at once: each key is claimed
// by one process, as GetOrLoad claims it (the others wait for it), and
// the loads of each process go to the loader in rounds: every key loaded
// once in the fleet, in at most 3 × ceil(30/MaxKeys) loader calls (the
// windows held open until every load has joined a round).
func TestBatcher_missesBatched(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		const procs, maxKeys = 3, 20
		keys := keyRange("m", 0, 30)
		f := newStaleFleet(t, s, procs, nil, &cache.BatcherOptions{MaxKeys: maxKeys})
		f.getInRounds(t, ctx, func(int) []string { return keys }, len(keys))
		calls := f.checkRounds(t, keys, procs*((len(keys)+maxKeys-1)/maxKeys), maxKeys)
		t.Logf("%d loader calls for %d missing keys in %d processes", len(calls), len(keys), procs)
	}, manyKinds...)
}

// A capped backend's permit is the round's, not each key's: with a cap of
// one, the missing keys of Get in two processes still go to the loader
// in one round per process, one call at a time. (Each key's load took a
// permit before its loader joined the round: only one key of the fleet
// could wait in a round, and the others waited for the permit.)
func TestBatcher_backendCapPerRound(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		const procs = 2
		keys := keyRange("m", 0, 10)
		f := newStaleFleet(t, s, procs, nil, &cache.BatcherOptions{MaxKeys: 20}, func(o *cache.Options) {
			o.Backends, o.Backend = map[string]int{"db": 1}, "db"
		})
		f.getInRounds(t, ctx, func(i int) []string { return keys[i*len(keys)/procs : (i+1)*len(keys)/procs] }, len(keys))
		calls := f.checkRounds(t, keys, procs, 20)
		if len(calls) != procs {
			t.Errorf("%d loader calls, want %d: one round per process: %v", len(calls), procs, calls)
		}
	}, manyKinds...)
}

// Close while a round of Get's loads is open: the round is not loaded,
// the caller gets an error, and the key's claim is freed.
func TestBatcher_closeEndsLoadRound(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		f := newStaleFleet(t, s, 1, nil, nil)
		b, c := f.batchers[0], f.caches[0]
		t.Cleanup(cache.HoldBatcherWindows(b))
		got := make(chan error, 1)
		go func() {
			_, err := b.Get(ctx, "cold")
			got <- err
		}()
		redistest.WaitFor(t, ctx, "the load in a round", func() bool { return cache.BatcherLoadsJoined(b) == 1 })
		c.Close()
		if err := redistest.Recv(t, ctx, got, "Get's answer"); err == nil {
			t.Error("Get answered without an error: the abandoned round loaded")
		}
		rc := s.Client(t)
		if n, err := rc.Exists(ctx, valueKey(f.ns, "cold")).Result(); err != nil || n != 0 {
			t.Errorf("the key after Close: %d, %v; want its claim freed", n, err)
		}
		if calls, _ := f.l.loaded(); len(calls) != 0 {
			t.Errorf("loader calls %v after Close", calls)
		}
	}, redistest.Redis8, redistest.Valkey, redistest.Miniredis)
}
