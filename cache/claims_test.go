package cache_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/failpoint"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/redis/go-redis/v9"
)

// The windows of issue 37 between a rebuild's outcome and a waiter's
// next step: each test below failed on the code before the one claim
// protocol (its note quotes how).

// TestGetOrLoad_replaceWaiterHearsFailure: a process waiting for another
// process's rebuild of an entry that must be replaced rather than served
// (here a remembered not-found past its freshness) learns that the
// rebuild failed, as a waiter on a miss does, and runs no loader of its
// own against the failing backend. (Before: it waited with no claim to
// match, so the failure notice was ignored; the rebuild freed its lock
// before announcing; the waiter read the key again, took the lock and
// loaded.)
func TestGetOrLoad_replaceWaiterHearsFailure(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		rp := expiredNotFound(t, ctx, s)
		a := rp.cache(nil)
		b := rp.cache(&cache.Options{PollInterval: 30 * time.Second, WaitTimeout: time.Minute})

		holder, open := failingLoad(t, ctx, a, "cache a to take the rebuild lock and load")
		var calls atomic.Int32
		waiter := goGetOrLoad(ctx, b, "k", neverLoad[string](&calls))
		redistest.WaitFor(t, ctx, "cache b to wait, subscribed", func() bool { return cache.CoveredWaits(b) > 0 })
		open()

		if r := redistest.Recv(t, ctx, holder, "cache a"); r.err == nil || !strings.Contains(r.err.Error(), "upstream answered 503") {
			t.Errorf("cache a: %q, %v; want its loader's error", r.v, r.err)
		}
		r := redistest.Recv(t, ctx, waiter, "cache b")
		if !errors.Is(r.err, cache.ErrRemoteLoad) || !strings.Contains(r.err.Error(), "upstream answered 503") || calls.Load() != 0 {
			t.Errorf("cache b: %q, %v, %d loads of its own; want ErrRemoteLoad with a's error and no load", r.v, r.err, calls.Load())
		}
	})
}

// TestGetOrLoad_replaceWaiterReadsAgain: a caller that read bytes it
// cannot use, found the rebuild lock R held and waited for R, does not
// take R's value when R wrote it over other bytes: a Set, then the bytes
// the caller read, came after R's write and before R announced (R paused
// by a failpoint). R's value is older than what the caller read; the
// caller reads the key again and loads. (Before: it took R's value, older
// than a Set it had seen; the robustness suite's knownReplaceWaiter.)
func TestGetOrLoad_replaceWaiterReadsAgain(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		rp := expiredNotFound(t, ctx, s)
		a, b := rp.cache(nil), rp.cache(nil)
		c := rp.cache(&cache.Options{PollInterval: 20 * time.Millisecond, WaitTimeout: time.Minute})

		release, open := gate(t)
		paused := make(chan struct{}, 1)
		follow(t, func(_ context.Context, call, name string) {
			if call == "R" && name == failpoint.CacheWritten {
				paused <- struct{}{}
				<-release
			}
		})
		rebuild := goGetOrLoad(mark(ctx, "R"), a, "k", func(context.Context) (string, error) { return "R's value", nil })
		redistest.Recv(t, ctx, paused, "cache a to write R's value over the not-found")
		if err := cache.Set(ctx, b, "k", "set after R's write"); err != nil {
			t.Fatalf("Set: %v", err)
		}
		if err := s.Client(t).Set(ctx, valueKey(rp.ns, "k"), "bytes nobody can decode", 0).Err(); err != nil {
			t.Fatalf("writing the bytes c reads: %v", err)
		}
		var calls atomic.Int32
		waiter := goGetOrLoad(ctx, c, "k", func(context.Context) (string, error) {
			calls.Add(1)
			return "c's own load", nil
		})
		redistest.WaitFor(t, ctx, "cache c to wait for R, subscribed", func() bool { return cache.CoveredWaits(c) > 0 })
		open()

		if r := redistest.Recv(t, ctx, rebuild, "cache a"); r.err != nil || r.v != "R's value" {
			t.Errorf("cache a: %q, %v; want R's value", r.v, r.err)
		}
		if r := redistest.Recv(t, ctx, waiter, "cache c"); r.err != nil || r.v != "c's own load" || calls.Load() != 1 {
			t.Errorf("cache c: %q, %v, %d loads; want its own load: R's value is older than the bytes it read", r.v, r.err, calls.Load())
		}
	})
}

// replacePath is a namespace whose key k holds a not-found past its
// freshness, which a GetOrLoad replaces rather than serves (the replace
// path), and makes Caches on it sharing one clock.
type replacePath struct {
	t   *testing.T
	s   *redistest.Server
	ns  string
	clk *clock
}

// expiredNotFound stores a not-found under k with one Cache of a new
// namespace, then moves the clock past its freshness.
func expiredNotFound(t *testing.T, ctx context.Context, s *redistest.Server) *replacePath {
	rp := &replacePath{t: t, s: s, ns: namespace(t), clk: newClock()}
	a := rp.cache(nil)
	if _, err := cache.GetOrLoad(ctx, a, "k", func(context.Context) (string, error) { return "", loader.ErrNotFound }); !errors.Is(err, loader.ErrNotFound) {
		t.Fatalf("first load: %v; want ErrNotFound, remembered", err)
	}
	rp.clk.Advance(2 * time.Minute) // the not-found is past its freshness: replace it
	return rp
}

// cache returns a Cache on rp's namespace and clock, with o's poll
// interval and wait timeout (nil: the defaults).
func (rp *replacePath) cache(o *cache.Options) *cache.Cache {
	opts := cache.Options{Namespace: rp.ns, Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Negative: time.Minute}, Now: rp.clk.Now}
	if o != nil {
		opts.PollInterval, opts.WaitTimeout = o.PollInterval, o.WaitTimeout
	}
	return newCacheOn(rp.t, rp.s.Client(rp.t), &opts)
}

// blockNthGet makes the n-th GET of key sent on rec's client wait, after
// it is sent to the hook and before it goes to the server, until the
// returned gate opens; reached receives when it waits.
func blockNthGet(t *testing.T, rec *recorder, key string, n int32) (reached <-chan struct{}, open func()) {
	t.Helper()
	ch := make(chan struct{}, 1)
	release, open := gate(t)
	var seen atomic.Int32
	rec.onBefore(func(args []string) {
		if len(args) == 2 && args[0] == "get" && args[1] == key && seen.Add(1) == n {
			ch <- struct{}{}
			<-release
		}
	})
	return ch, open
}

// TestGetOrLoad_waiterKeepsFirstClaim: a caller whose first read found
// another process's claim, and whose next read is in flight when that
// rebuild fails (its notice arrives meanwhile, and the read finds the key
// free), gets ErrRemoteLoad and runs no loader. (Before: the claim its
// first read found was forgotten, the notice dropped as older than the
// read, and the caller claimed the free key and loaded.)
func TestGetOrLoad_waiterKeepsFirstClaim(t *testing.T) {
	// b's first GET finds a's claim; its second waits.
	testWaiterKeepsFirstClaim(t, 2, func(ctx context.Context, b *cache.Cache, calls *atomic.Int32) error {
		_, err := cache.GetOrLoad(ctx, b, "k", neverLoad[string](calls))
		return err
	})
}

// TestGetOrLoadMany_waiterKeepsFirstClaim is the same window for a key of
// GetOrLoadMany whose read (MGET) found another process's claim: the
// GET after its subscription was confirmed is in flight when the rebuild
// fails.
func TestGetOrLoadMany_waiterKeepsFirstClaim(t *testing.T) {
	testWaiterKeepsFirstClaim(t, 1, func(ctx context.Context, b *cache.Cache, calls *atomic.Int32) error {
		_, err := cache.GetOrLoadMany(ctx, b, []string{"k"}, func(_ context.Context, keys []string) (map[string]string, error) {
			calls.Add(1)
			return nil, errors.New("cache b loaded")
		})
		return err
	})
}

// testWaiterKeepsFirstClaim runs the window of the waiterKeepsFirstClaim
// tests on every server: cache a claims k and loads; cache b calls get,
// whose nth GET of k waits until a's load has failed and a has announced
// it and freed its claim; b must get ErrRemoteLoad with no load of its
// own (calls, which get's loader counts).
func testWaiterKeepsFirstClaim(t *testing.T, nth int32, get func(ctx context.Context, b *cache.Cache, calls *atomic.Int32) error) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		a := newCacheOn(t, s.Client(t), &cache.Options{Namespace: ns})
		rcb := s.Client(t)
		recb := record(rcb)
		b := newCacheOn(t, rcb, &cache.Options{Namespace: ns, PollInterval: 30 * time.Second, WaitTimeout: time.Minute})

		holder, open := failingLoad(t, ctx, a, "cache a to claim the key and load")
		reached, let := blockNthGet(t, recb, valueKey(ns, "k"), nth)
		var calls atomic.Int32
		got := make(chan error, 1)
		go func() { got <- get(ctx, b, &calls) }()
		redistest.Recv(t, ctx, reached, "cache b's read after it saw a's claim")
		open()
		redistest.Recv(t, ctx, holder, "cache a (announced, then freed its claim)")
		let()
		err := redistest.Recv(t, ctx, got, "cache b")
		if !errors.Is(err, cache.ErrRemoteLoad) || calls.Load() != 0 {
			t.Errorf("cache b: %v, %d loads of its own; want ErrRemoteLoad and no load", err, calls.Load())
		}
	})
}

// TestGetOrLoad_failureBeforeSubscribe: a caller that found another
// process's claim, and whose subscription to the key's channel the server
// confirms only after that rebuild failed, announced the failure (to
// nobody here) and freed its claim, gets ErrRemoteLoad with the
// rebuild's error and runs no loader of its own: the failure outlives its
// announcement in the key's failure marker. Every pairing of the rebuild
// (GetOrLoad, a GetOrLoadMany batch) and the waiter (GetOrLoad, which
// subscribes before its second read; GetOrLoadMany, after its MGET), and
// the replace path: an expired not-found, the rebuild lock held by the
// failing rebuild. A caller that did not see the claim loads, marker or
// not. (Before: the waiter's read after the confirmation found the key
// free, and it claimed the key and loaded: the robustness suite's
// knownLostFailure.)
func TestGetOrLoad_failureBeforeSubscribe(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replace bool // the key holds an expired not-found: the rebuild holds the rebuild lock
		rebuild failingRebuild
		wait    waitingCall
	}{
		{name: "GetOrLoad", rebuild: failingGetOrLoad, wait: waitGetOrLoad},
		{name: "GetOrLoadMany", rebuild: failingGetOrLoad, wait: waitGetOrLoadMany},
		{name: "batchRebuild", rebuild: failingGetOrLoadMany, wait: waitGetOrLoad},
		{name: "replace", replace: true, rebuild: failingGetOrLoad, wait: waitGetOrLoad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
				ctx := testCtx(t)
				w := failBeforeSubscribe(t, ctx, s, window{replace: tc.replace, rebuild: tc.rebuild, wait: tc.wait})
				if !errors.Is(w.err, cache.ErrRemoteLoad) || !strings.Contains(w.err.Error(), "upstream answered 503") || w.calls != 0 {
					t.Errorf("cache b: %q, %v, %d loads of its own; want ErrRemoteLoad with a's error, and no load", w.v, w.err, w.calls)
				}
				if st := w.b.Stats(); st.Loads != 0 || w.waits != 1 {
					t.Errorf("cache b: stats %+v, %d EventWaits; want no load, and one wait", st, w.waits)
				}
				// The failure is not stored, and the marker answers only
				// those that saw the claim: the next call loads.
				if v, err := cache.GetOrLoad(ctx, w.b, "k", func(context.Context) (string, error) { return "b", nil }); err != nil || v != "b" {
					t.Errorf("next call: %q, %v; want a new load", v, err)
				}
			})
		})
	}
}

// TestGetOrLoad_failureMarkerBesideWrites: what a waiter in the window of
// TestGetOrLoad_failureBeforeSubscribe gets when the key changed after
// the failure and before the waiter's read. A Set: its value (the waiter
// reads the key before the marker). A Delete: the failure still (the
// waiter began before the Delete returned; the marker stands). Another
// process's rebuild that failed too: the marker now names that rebuild,
// which the waiter did not see, and the waiter claims the key and loads,
// as it did before markers (a limit: the marker keeps the key's last
// failure only).
func TestGetOrLoad_failureMarkerBesideWrites(t *testing.T) {
	for _, tc := range []struct {
		name  string
		then  func(t *testing.T, ctx context.Context, a *cache.Cache)
		check func(t *testing.T, w waited)
	}{
		{name: "Set", then: func(t *testing.T, ctx context.Context, a *cache.Cache) {
			if err := cache.Set(ctx, a, "k", "set after the failure"); err != nil {
				t.Errorf("Set: %v", err)
			}
		}, check: func(t *testing.T, w waited) {
			if w.err != nil || w.v != "set after the failure" || w.calls != 0 {
				t.Errorf("cache b: %q, %v, %d loads; want the Set's value and no load", w.v, w.err, w.calls)
			}
		}},
		{name: "Delete", then: func(t *testing.T, ctx context.Context, a *cache.Cache) {
			if err := a.Delete(ctx, "k"); err != nil {
				t.Errorf("Delete: %v", err)
			}
		}, check: func(t *testing.T, w waited) {
			if !errors.Is(w.err, cache.ErrRemoteLoad) || w.calls != 0 {
				t.Errorf("cache b: %q, %v, %d loads; want ErrRemoteLoad and no load", w.v, w.err, w.calls)
			}
		}},
		{name: "anotherFailure", then: func(t *testing.T, ctx context.Context, a *cache.Cache) {
			if _, err := cache.GetOrLoad(ctx, a, "k", func(context.Context) (string, error) {
				return "", errors.New("the second rebuild failed too")
			}); err == nil {
				t.Errorf("the second rebuild: no error")
			}
		}, check: func(t *testing.T, w waited) {
			if w.calls != 1 {
				t.Errorf("cache b: %q, %v, %d loads; want its own load: the marker names a rebuild it did not see", w.v, w.err, w.calls)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
				ctx := testCtx(t)
				tc.check(t, failBeforeSubscribe(t, ctx, s, window{rebuild: failingGetOrLoad, wait: waitGetOrLoad,
					then: func(a *cache.Cache) { tc.then(t, ctx, a) }}))
			})
		})
	}
}

// failingRebuild is a call of a on k whose loader fails with "upstream
// answered 503" once release is closed.
type failingRebuild func(ctx context.Context, a *cache.Cache, release <-chan struct{}) error

func failingGetOrLoad(ctx context.Context, a *cache.Cache, release <-chan struct{}) error {
	_, err := cache.GetOrLoad(ctx, a, "k", func(context.Context) (string, error) {
		<-release
		return "", errors.New("upstream answered 503")
	})
	return err
}

func failingGetOrLoadMany(ctx context.Context, a *cache.Cache, release <-chan struct{}) error {
	_, err := cache.GetOrLoadMany(ctx, a, []string{"k"}, func(context.Context, []string) (map[string]string, error) {
		<-release
		return nil, errors.New("upstream answered 503")
	})
	return err
}

// waitingCall is a call of b on k whose loader counts its runs in calls.
type waitingCall func(ctx context.Context, b *cache.Cache, calls *atomic.Int32) (string, error)

func waitGetOrLoad(ctx context.Context, b *cache.Cache, calls *atomic.Int32) (string, error) {
	return cache.GetOrLoad(ctx, b, "k", neverLoad[string](calls))
}

func waitGetOrLoadMany(ctx context.Context, b *cache.Cache, calls *atomic.Int32) (string, error) {
	m, err := cache.GetOrLoadMany(ctx, b, []string{"k"}, func(context.Context, []string) (map[string]string, error) {
		calls.Add(1)
		return nil, errors.New("this loader must not run")
	})
	return m["k"], err
}

// waited is what the waiter of failBeforeSubscribe got.
type waited struct {
	b     *cache.Cache
	v     string
	err   error
	calls int32 // runs of its own loader
	waits int32 // its EventWaits
}

// window is one run of failBeforeSubscribe.
type window struct {
	replace bool // the key holds an expired not-found: the rebuild holds the rebuild lock
	rebuild failingRebuild
	wait    waitingCall
	then    func(a *cache.Cache)                      // run once a's rebuild failed, before b subscribes, if set
	ns      string                                    // the namespace, if not one of its own
	client  func(tb testing.TB) redis.UniversalClient // the client of each Cache; the server's own if nil
	observe func(cache.Event)                         // a's Observer, if set
}

// failBeforeSubscribe runs the window of TestGetOrLoad_failureBeforeSubscribe
// on s with a Cache a and a Cache b (as two processes), in a namespace of
// its own (or w.ns): a's rebuild of k (w.rebuild) loads until released; b's call
// (w.wait) reads k, finds a's claim (or, w.replace, a's rebuild lock
// beside an expired not-found), and is about to subscribe to k's channel
// when a's load fails: a has announced the failure and freed its claim
// before b subscribes, and then w.then runs. It checks that a's call got
// its loader's error, and returns what b's call got.
func failBeforeSubscribe(t *testing.T, ctx context.Context, s *redistest.Server, w window) waited {
	t.Helper()
	client := w.client
	if client == nil {
		client = s.Client
	}
	ns := w.ns
	if ns == "" {
		ns = namespace(t)
	}
	clk := newClock()
	exp := cache.ExpiryPolicy{Fresh: time.Minute, Negative: time.Minute}
	a := newCacheOn(t, client(t), &cache.Options{Namespace: ns, Expiry: exp, Now: clk.Now, Observer: w.observe})
	// Polls and the wait limit lie far beyond the test: what b learns, it
	// learns from its reads after it subscribed.
	var waits atomic.Int32
	b := newCacheOn(t, client(t), &cache.Options{Namespace: ns, Expiry: exp, Now: clk.Now,
		PollInterval: 30 * time.Second, WaitTimeout: time.Minute,
		Observer: func(e cache.Event) {
			if e.Kind == cache.EventWait && e.Key == "k" {
				waits.Add(1)
			}
		}})
	if w.replace {
		if _, err := cache.GetOrLoad(ctx, a, "k", func(context.Context) (string, error) { return "", loader.ErrNotFound }); !errors.Is(err, loader.ErrNotFound) {
			t.Fatalf("first load: %v; want ErrNotFound, remembered", err)
		}
		clk.Advance(2 * time.Minute) // the not-found is past its freshness: replace it
	}

	release, open := gate(t)
	held := make(chan error, 1)
	go func() { held <- w.rebuild(ctx, a, release) }()
	rc := s.Client(t)
	redistest.WaitFor(t, ctx, "cache a to claim k", func() bool {
		if w.replace {
			return rc.Exists(ctx, valueKey(ns, "k")+":lock").Val() == 1
		}
		v := rc.Get(ctx, valueKey(ns, "k")).Val()
		return v != "" && v[0] != 0xF5 // a lock value, not an entry
	})

	var once atomic.Bool
	failed := make(chan error, 1)
	cache.BeforeSubscribe(b, func(string) {
		if once.CompareAndSwap(false, true) {
			// b has found a's claim: a fails, announces it to nobody
			// here, and frees its claim before b subscribes.
			open()
			failed <- redistest.Recv(t, ctx, held, "cache a's failed rebuild")
			if w.then != nil {
				w.then(a)
			}
		}
	})
	var calls atomic.Int32
	v, err := w.wait(ctx, b, &calls)
	if !once.Load() {
		t.Fatal("cache b never subscribed")
	}
	if aerr := <-failed; aerr == nil || !strings.Contains(aerr.Error(), "upstream answered 503") {
		t.Errorf("cache a: %v; want its loader's error", aerr)
	}
	return waited{b: b, v: v, err: err, calls: calls.Load(), waits: waits.Load()}
}

// TestGetOrLoadMany_failOpenJoinsRefresh: GetOrLoadMany failing open
// takes the result of a background refresh that is loading one of its
// keys in the process, and loads only the others. (Before: it ran its
// loader for every key, beside the refresh.)
func TestGetOrLoadMany_failOpenJoinsRefresh(t *testing.T) {
	s := redistest.Start(t, redistest.Redis8) // killed: not shared
	ctx := testCtx(t)
	c := staleCache(t, ctx, s)

	entered := make(chan struct{}, 1)
	release, open := gate(t)
	refresh := func(ctx context.Context) (string, error) {
		entered <- struct{}{}
		select {
		case <-release:
			return "new", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if v, err := cache.GetOrLoad(ctx, c, "k", refresh); err != nil || v != "old" {
		t.Fatalf("GetOrLoad = %q, %v; want the stale value", v, err)
	}
	redistest.Recv(t, ctx, entered, "the refresh to start its load")
	s.Kill()

	var asked atomic.Pointer[[]string]
	got := make(chan map[string]string, 1)
	go func() {
		m, err := cache.GetOrLoadMany(ctx, c, []string{"k", "j"}, func(_ context.Context, keys []string) (map[string]string, error) {
			asked.Store(&keys)
			return map[string]string{"k": "batch", "j": "j"}, nil
		})
		if err != nil {
			t.Errorf("GetOrLoadMany: %v", err)
		}
		got <- m
	}()
	redistest.WaitFor(t, ctx, "the fail-open batch to join the refresh's load, or load k itself",
		func() bool {
			return cache.LoadJoiners(c, "k") > 0 || asked.Load() != nil && slices.Contains(*asked.Load(), "k")
		})
	open()
	m := redistest.Recv(t, ctx, got, "GetOrLoadMany")
	if p := asked.Load(); p == nil || !slices.Equal(*p, []string{"j"}) {
		t.Errorf("the batch loader was asked for %v; want [j] alone: k is loaded by the refresh in progress", p)
	}
	if m["k"] != "new" || m["j"] != "j" {
		t.Errorf("GetOrLoadMany = %v; want k from the refresh (new) and j from the batch", m)
	}
}

// TestGetOrLoad_failOpenJoinsBatchRefresh: a GetOrLoad failing open takes
// the result of GetOrLoadMany's background batch refresh loading its key.
// (Before: batch loads were not registered as the key's loader run, and
// the loader ran beside it.)
func TestGetOrLoad_failOpenJoinsBatchRefresh(t *testing.T) {
	s := redistest.Start(t, redistest.Redis8) // killed: not shared
	ctx := testCtx(t)
	c := staleCache(t, ctx, s)

	entered := make(chan struct{}, 1)
	release, open := gate(t)
	m, err := cache.GetOrLoadMany(ctx, c, []string{"k"}, func(ctx context.Context, keys []string) (map[string]string, error) {
		entered <- struct{}{}
		select {
		case <-release:
			return map[string]string{"k": "new"}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	if err != nil || m["k"] != "old" {
		t.Fatalf("GetOrLoadMany = %v, %v; want the stale value", m, err)
	}
	redistest.Recv(t, ctx, entered, "the batch refresh to start its load")
	s.Kill()

	var runs atomic.Int32
	got := goGetOrLoad(ctx, c, "k", func(context.Context) (string, error) { runs.Add(1); return "single", nil })
	redistest.WaitFor(t, ctx, "the fail-open call to join the batch refresh, or load itself",
		func() bool { return cache.LoadJoiners(c, "k") > 0 || runs.Load() > 0 })
	open()
	r := redistest.Recv(t, ctx, got, "the fail-open GetOrLoad")
	if runs.Load() != 0 || r.err != nil || r.v != "new" {
		t.Errorf("fail-open GetOrLoad: %q, %v, its loader ran %d times; want the batch refresh's value (new) and no run of its own", r.v, r.err, runs.Load())
	}
}

// TestGetOrLoadMany_refreshBesideFailOpen: while a load of a key runs in
// the process (a fail-open one), GetOrLoadMany's background refresh of
// that key's stale value does not load it beside; a later one does.
func TestGetOrLoadMany_refreshBesideFailOpen(t *testing.T) {
	s := redistest.Start(t, redistest.Redis8)
	ctx := testCtx(t)
	c := staleCache(t, ctx, s)
	var asked atomic.Int32
	load := func(_ context.Context, keys []string) (map[string]string, error) {
		asked.Add(1)
		return map[string]string{"k": "new"}, nil
	}
	end := cache.BeginLoad(c, "k")
	if m, err := cache.GetOrLoadMany(ctx, c, []string{"k"}, load); err != nil || m["k"] != "old" {
		t.Fatalf("GetOrLoadMany = %v, %v; want the stale value", m, err)
	}
	redistest.WaitFor(t, ctx, "the batch refresh to end", func() bool { return !cache.RefreshRunning(c, "k") })
	if n := asked.Load(); n != 0 {
		t.Errorf("the batch refresh ran the loader %d times beside the load in progress; want none", n)
	}
	end()
	if m, err := cache.GetOrLoadMany(ctx, c, []string{"k"}, load); err != nil || m["k"] != "old" {
		t.Fatalf("GetOrLoadMany = %v, %v; want the stale value", m, err)
	}
	redistest.WaitFor(t, ctx, "the batch refresh to end", func() bool { return !cache.RefreshRunning(c, "k") })
	if n := asked.Load(); n != 1 {
		t.Errorf("the batch refresh after the load ended ran the loader %d times; want once", n)
	}
}

// failingLoad starts a GetOrLoad of k on a whose loader fails (with
// "upstream answered 503") once open is called, and returns when the
// loader runs (what names that moment); holder delivers a's result.
func failingLoad(t *testing.T, ctx context.Context, a *cache.Cache, what string) (holder <-chan result[string], open func()) {
	t.Helper()
	started := make(chan struct{})
	fail, open := gate(t)
	holder = goGetOrLoad(ctx, a, "k", func(context.Context) (string, error) {
		close(started)
		<-fail
		return "", errors.New("upstream answered 503")
	})
	redistest.Recv(t, ctx, started, what)
	return holder, open
}

// staleCache returns a Cache on s (TTL a minute, Stale an hour) whose
// key k holds "old", which its clock already finds stale.
func staleCache(t *testing.T, ctx context.Context, s *redistest.Server) *cache.Cache {
	t.Helper()
	var clock atomic.Int64 // offset from the real time, ns
	now := func() time.Time { return time.Now().Add(time.Duration(clock.Load())) }
	c := newCacheOn(t, s.Client(t), &cache.Options{Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: time.Hour}, Now: now})
	if err := cache.Set(ctx, c, "k", "old"); err != nil {
		t.Fatal(err)
	}
	clock.Store(int64(2 * time.Minute)) // "old" is stale
	return c
}
