package cache_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/loader"
	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"
)

// This file tests GetOrLoad's behaviour in one process: several Cache
// instances stand for several processes. Everything runs on real servers;
// faults and sequencing come from hooks on the real client (recorder), a
// settable clock (Options.Now) and channels, never from sleeping.

// clock is a settable Options.Now, safe for concurrent use. It starts at
// the real time and only moves when told to.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// recorder is a go-redis hook that records the arguments of every command
// its client sends (pipelined ones included; subscriptions do not go
// through hooks) and runs optional functions before and after each one.
type recorder struct {
	mu     sync.Mutex
	cmds   [][]string
	before func(args []string) // may block to hold the command back
	after  func(args []string, err error)
}

func record(rc redis.UniversalClient) *recorder {
	r := &recorder{}
	rc.AddHook(r)
	return r
}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := r.sent(cmd)
		err := next(ctx, cmd)
		r.done(args, cmd.Err())
		return err
	}
}

func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		all := make([][]string, len(cmds))
		for i, cmd := range cmds {
			all[i] = r.sent(cmd)
		}
		err := next(ctx, cmds)
		for i, cmd := range cmds {
			r.done(all[i], cmd.Err())
		}
		return err
	}
}

func (r *recorder) sent(cmd redis.Cmder) []string {
	raw := cmd.Args()
	args := make([]string, len(raw))
	for i, a := range raw {
		switch a := a.(type) {
		case string:
			args[i] = a
		case []byte:
			args[i] = string(a)
		default:
			args[i] = fmt.Sprint(a)
		}
	}
	if len(args) > 0 {
		args[0] = strings.ToLower(args[0])
	}
	if len(args) == 0 || handshake(args[0]) {
		return args
	}
	r.mu.Lock()
	r.cmds = append(r.cmds, args)
	fn := r.before
	r.mu.Unlock()
	if fn != nil {
		fn(args)
	}
	return args
}

// handshake reports whether name is what go-redis sends on every new
// connection (the subscription's reconnects included): not the cache's
// traffic.
func handshake(name string) bool {
	switch name {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

func (r *recorder) done(args []string, err error) {
	if len(args) == 0 || handshake(args[0]) {
		return
	}
	r.mu.Lock()
	fn := r.after
	r.mu.Unlock()
	if fn != nil {
		fn(args, err)
	}
}

// onBefore and onAfter set the functions run around each command.
func (r *recorder) onBefore(fn func(args []string)) {
	r.mu.Lock()
	r.before = fn
	r.mu.Unlock()
}

func (r *recorder) onAfter(fn func(args []string, err error)) {
	r.mu.Lock()
	r.after = fn
	r.mu.Unlock()
}

// reset returns the commands recorded so far and forgets them.
func (r *recorder) reset() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.cmds
	r.cmds = nil
	return out
}

// signalOn returns a channel that receives once per command whose name is
// name and whose first argument (the key) is key, after it completed.
func (r *recorder) signalOn(name, key string) <-chan struct{} {
	ch := make(chan struct{}, 64)
	r.onAfter(func(args []string, _ error) {
		if len(args) > 1 && args[0] == name && args[1] == key {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	})
	return ch
}

// gate returns a channel that loaders block on and a function that opens
// it. The gate is also opened at cleanup (before the caches are closed), so
// a failed test leaves no loader blocked.
func gate(tb testing.TB) (<-chan struct{}, func()) {
	tb.Helper()
	ch := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(ch) }) }
	tb.Cleanup(open)
	return ch, open
}

type result[V any] struct {
	v   V
	err error
}

// goGetOrLoad runs GetOrLoad in a goroutine and delivers its result.
func goGetOrLoad[V any](ctx context.Context, c *cache.Cache, key string, load loader.Func[V]) <-chan result[V] {
	ch := make(chan result[V], 1)
	go func() {
		v, err := cache.GetOrLoad(ctx, c, key, load)
		ch <- result[V]{v, err}
	}()
	return ch
}

// valueKey is where a Cache in namespace ns stores a short printable key.
func valueKey(ns, key string) string { return ns + ":{" + key + "}" }

func randomString(tb testing.TB, n int) string {
	tb.Helper()
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)[:n]
}

// heldLoader closes started when it begins, then returns v once release
// is closed, or gives up when its context ends.
func heldLoader(started chan<- struct{}, release <-chan struct{}, v string) loader.Func[string] {
	return func(ctx context.Context) (string, error) {
		close(started)
		select {
		case <-release:
			return v, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// neverLoad is a loader for callers that must be served without loading.
func neverLoad[V any](calls *atomic.Int32) loader.Func[V] {
	return func(context.Context) (V, error) {
		calls.Add(1)
		var zero V
		return zero, errors.New("this loader must not run")
	}
}

// TestGetOrLoad_callerCancels: a caller that gives up returns its ctx
// error at once; the load goes on, undisturbed, for the caller that shares
// the flight and for a caller in another Cache waiting on the claim.
func TestGetOrLoad_callerCancels(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		rc := s.Client(t)
		a := newCacheOn(t, rc, &cache.Options{Namespace: ns})
		b := newCacheOn(t, rc, &cache.Options{Namespace: ns})
		release, open := gate(t)
		started := make(chan struct{})
		var loads atomic.Int32
		load := func(ctx context.Context) (string, error) {
			if loads.Add(1) == 1 {
				close(started)
			}
			select {
			case <-release:
				return "v", nil
			case <-ctx.Done():
				return "", fmt.Errorf("the load's context ended: %w", ctx.Err())
			}
		}

		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		first := goGetOrLoad(cctx, a, "k", load)
		redistest.Recv(t, ctx, started, "the load to start")
		joiner := goGetOrLoad(ctx, a, "k", load)
		other := goGetOrLoad(ctx, b, "k", load)

		cancel()
		// The load is still blocked, so this returns only if the cancelled
		// caller does not wait for it.
		r := redistest.Recv(t, ctx, first, "the cancelled caller to return")
		if !errors.Is(r.err, context.Canceled) || r.v != "" {
			t.Fatalf("cancelled caller got %q, %v; want context.Canceled", r.v, r.err)
		}

		open()
		for name, ch := range map[string]<-chan result[string]{"joiner": joiner, "caller in another Cache": other} {
			r := redistest.Recv(t, ctx, ch, name)
			if r.err != nil || r.v != "v" {
				t.Errorf("%s got %q, %v; want v", name, r.v, r.err)
			}
		}
		if n := loads.Load(); n != 1 {
			t.Errorf("%d loads, want 1", n)
		}
		if v, err := cache.Get[string](ctx, b, "k"); err != nil || v != "v" {
			t.Errorf("Get after the load = %q, %v; want v stored", v, err)
		}
	})
}

// TestGetOrLoad_freshHitIsOneGet: a fresh hit sends one GET of the value
// key and nothing else: no lock, no script, no publish.
func TestGetOrLoad_freshHitIsOneGet(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		rc := s.Client(t)
		rec := record(rc)
		c := newCacheOn(t, rc, &cache.Options{Namespace: ns, StaleTTL: time.Minute})
		if v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (user, error) { return user{1, "ada"}, nil }); err != nil || v.Name != "ada" {
			t.Fatalf("first call: %+v, %v", v, err)
		}
		if len(rec.reset()) == 0 {
			t.Fatal("the recorder saw no command for the miss: the hook does not work")
		}
		var calls atomic.Int32
		const hits = 3
		for i := range hits {
			v, err := cache.GetOrLoad(ctx, c, "k", neverLoad[user](&calls))
			if err != nil || v != (user{1, "ada"}) {
				t.Fatalf("hit %d: %+v, %v", i, v, err)
			}
		}
		cmds := rec.reset()
		if len(cmds) != hits {
			t.Fatalf("%d hits sent %d commands, want %d: %q", hits, len(cmds), hits, cmds)
		}
		for _, cmd := range cmds {
			if len(cmd) != 2 || cmd[0] != "get" || cmd[1] != valueKey(ns, "k") {
				t.Errorf("a hit sent %q, want [get %s]", cmd, valueKey(ns, "k"))
			}
		}
		if st := c.Stats(); st.Hits != hits || st.Loads != 1 || calls.Load() != 0 {
			t.Errorf("stats = %+v, loader calls %d; want %d hits, 1 load", st, calls.Load(), hits)
		}
	})
}

// TestGetOrLoad_staleWhileOneRefreshes: a stale value is served at once by
// every Cache while exactly one of them refreshes it; afterwards all serve
// the new value. A large value's conditional write compares a digest: no
// command carries the old value.
func TestGetOrLoad_staleWhileOneRefreshes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, size := range []int{16, 10 << 10} {
			t.Run(fmt.Sprintf("%dB", size), func(t *testing.T) {
				ctx := testCtx(t)
				clk := newClock()
				opts := cache.Options{Namespace: namespace(t), TTL: time.Minute, StaleTTL: 10 * time.Minute, Now: clk.Now}
				const n = 3
				var cs []*cache.Cache
				var recs []*recorder
				for range n {
					rc := s.Client(t)
					recs = append(recs, record(rc))
					cs = append(cs, newCacheOn(t, rc, &opts))
				}
				old, next := randomString(t, size), randomString(t, size)
				if v, err := cache.GetOrLoad(ctx, cs[0], "k", func(context.Context) (string, error) { return old, nil }); err != nil || v != old {
					t.Fatalf("initial load: %.20q, %v", v, err)
				}
				clk.Advance(2 * time.Minute) // past TTL, within StaleTTL

				started := make(chan struct{})
				release, open := gate(t)
				var loads atomic.Int32
				refresh := func(ctx context.Context) (string, error) {
					if loads.Add(1) == 1 {
						close(started)
					}
					select {
					case <-release:
						return next, nil
					case <-ctx.Done():
						return "", ctx.Err()
					}
				}
				lockKey := valueKey(opts.Namespace, "k") + ":lock"
				announced := signalAnnounced(recs[0], opts.Namespace, "k")
				var tried []<-chan struct{}
				for _, r := range recs[1:] {
					tried = append(tried, r.signalOn("set", lockKey))
				}
				for _, r := range recs {
					r.reset()
				}

				// Cache 0 serves stale and starts the refresh, which blocks;
				// the others serve stale and find the refresh lock taken.
				for i, c := range cs {
					v, err := cache.GetOrLoad(ctx, c, "k", refresh)
					if err != nil || v != old {
						t.Fatalf("cache %d while stale: %.20q, %v; want the old value at once", i, v, err)
					}
					if i == 0 {
						redistest.Recv(t, ctx, started, "the refresh to start")
					} else {
						redistest.Recv(t, ctx, tried[i-1], fmt.Sprintf("cache %d to try the refresh lock", i))
					}
				}
				open()
				redistest.Recv(t, ctx, announced, "the refresh to write and announce")

				for i, c := range cs {
					v, err := cache.GetOrLoad(ctx, c, "k", refresh)
					if err != nil || v != next {
						t.Errorf("cache %d after the refresh: %.20q, %v; want the new value", i, v, err)
					}
				}
				if n := loads.Load(); n != 1 {
					t.Errorf("%d refresh loads across %d caches, want 1", n, len(cs))
				}
				for i, c := range cs {
					_ = c.Close() // waits for background work, so the counters are final
					st := c.Stats()
					wantRefreshes, wantLoads, wantContention := uint64(0), uint64(0), uint64(1)
					if i == 0 {
						wantRefreshes, wantLoads, wantContention = 1, 2, 0
					}
					if st.StaleHits != 1 || st.Hits != 1 || st.Refreshes != wantRefreshes || st.Loads != wantLoads ||
						st.LockContention != wantContention || st.WritesSkipped != 0 {
						t.Errorf("cache %d stats = %+v; want 1 stale hit, 1 hit, %d refreshes, %d loads, %d contention",
							i, st, wantRefreshes, wantLoads, wantContention)
					}
				}
				if size > 512 { // DigestThreshold
					for i, r := range recs {
						for _, cmd := range r.reset() {
							for _, a := range cmd {
								if strings.Contains(a, old) {
									t.Errorf("cache %d sent the old value in %q (%d bytes); want a digest", i, cmd[0], len(a))
								}
							}
						}
					}
				}
			})
		}
	})
}

// TestGetOrLoad_lateRefresherDoesNotReload: a process that saw the stale
// value but reaches the refresh lock only after another process refreshed
// the value and freed the lock must not load again.
func TestGetOrLoad_lateRefresherDoesNotReload(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		clk := newClock()
		opts := cache.Options{Namespace: namespace(t), TTL: time.Minute, StaleTTL: 10 * time.Minute, Now: clk.Now}
		rc0, rc1 := s.Client(t), s.Client(t)
		rec0, rec1 := record(rc0), record(rc1)
		c0, c1 := newCacheOn(t, rc0, &opts), newCacheOn(t, rc1, &opts)
		if _, err := cache.GetOrLoad(ctx, c0, "k", func(context.Context) (int, error) { return 1, nil }); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Minute)

		lockKey := valueKey(opts.Namespace, "k") + ":lock"
		atLock := make(chan struct{}, 1)
		proceed, open := gate(t)
		rec1.onBefore(func(args []string) {
			if len(args) > 1 && args[0] == "set" && args[1] == lockKey {
				atLock <- struct{}{}
				<-proceed
			}
		})
		var loads atomic.Int32
		load := func(context.Context) (int, error) { return int(loads.Add(1)) + 1, nil }

		// Cache 1 serves stale; its refresh is held back before the lock.
		if v, err := cache.GetOrLoad(ctx, c1, "k", load); err != nil || v != 1 {
			t.Fatalf("cache 1 while stale: %d, %v", v, err)
		}
		redistest.Recv(t, ctx, atLock, "cache 1's refresh to reach the lock")
		// Cache 0 serves stale too and refreshes the value completely.
		announced := signalAnnounced(rec0, opts.Namespace, "k")
		if v, err := cache.GetOrLoad(ctx, c0, "k", load); err != nil || v != 1 {
			t.Fatalf("cache 0 while stale: %d, %v", v, err)
		}
		redistest.Recv(t, ctx, announced, "cache 0's refresh to finish")
		// Now cache 1 gets the free lock, for a value that is fresh again.
		// Its refresh ends by freeing the lock (DELEX, DELIFEQ or a script,
		// all naming the key).
		freed := make(chan struct{}, 1)
		rec1.onAfter(func(args []string, _ error) {
			if args[0] != "set" && slices.Contains(args, lockKey) {
				select {
				case freed <- struct{}{}:
				default:
				}
			}
		})
		open()
		redistest.Recv(t, ctx, freed, "cache 1's refresh to free the lock")
		_ = c1.Close() // waits for the rest of its refresh
		if n := loads.Load(); n != 1 {
			t.Errorf("%d refresh loads, want 1: cache 1 reloaded a value refreshed meanwhile", n)
		}
		if v, err := cache.Get[int](ctx, c0, "k"); err != nil || v != 2 {
			t.Errorf("Get = %d, %v; want 2, the first refresh's value", v, err)
		}
		if ex, err := rc0.Exists(ctx, lockKey).Result(); err != nil || ex != 0 {
			t.Errorf("refresh lock left behind: EXISTS = %d, %v", ex, err)
		}
	})
}

// TestGetOrLoad_staleIfError: a failing refresh keeps the stale value
// served, reports the failure to the Observer, and is not retried by any
// Cache within RefreshBackoff.
func TestGetOrLoad_staleIfError(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		clk := newClock()
		ns := namespace(t)
		var mu sync.Mutex
		var loadEvents []cache.Event
		loadFailed := make(chan struct{}, 1)
		observe := func(e cache.Event) {
			if e.Kind != cache.EventLoad {
				return
			}
			mu.Lock()
			loadEvents = append(loadEvents, e)
			mu.Unlock()
			if e.Err != nil {
				select {
				case loadFailed <- struct{}{}:
				default:
				}
			}
		}
		opts := cache.Options{Namespace: ns, TTL: time.Minute, StaleTTL: 10 * time.Minute, RefreshBackoff: 10 * time.Minute, Now: clk.Now}
		rc := s.Client(t)
		rec := record(rc)
		aOpts := opts
		aOpts.Observer = observe
		a := newCacheOn(t, rc, &aOpts)
		rcB := s.Client(t)
		recB := record(rcB)
		b := newCacheOn(t, rcB, &opts)
		if _, err := cache.GetOrLoad(ctx, a, "k", func(context.Context) (string, error) { return "v1", nil }); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Minute)

		boom := errors.New("database down")
		var fails atomic.Int32
		failing := func(context.Context) (string, error) { fails.Add(1); return "", boom }
		announced := signalAnnounced(rec, ns, "k")
		if v, err := cache.GetOrLoad(ctx, a, "k", failing); err != nil || v != "v1" {
			t.Fatalf("stale call: %q, %v; want v1", v, err)
		}
		redistest.Recv(t, ctx, loadFailed, "the failed refresh's EventLoad")
		redistest.Recv(t, ctx, announced, "the failed refresh to announce")
		// A stale hit starts no refresh while one is still running.
		redistest.WaitFor(t, ctx, "the failed refresh to end", func() bool { return !cache.RefreshRunning(a, "k") })

		// Both caches serve stale again; each one's refresh finds the lock
		// held for RefreshBackoff.
		var calls atomic.Int32
		lockKey := valueKey(ns, "k") + ":lock"
		for _, x := range []struct {
			name string
			c    *cache.Cache
			rec  *recorder
		}{{"same cache", a, rec}, {"other cache", b, recB}} {
			tried := x.rec.signalOn("set", lockKey)
			if v, err := cache.GetOrLoad(ctx, x.c, "k", neverLoad[string](&calls)); err != nil || v != "v1" {
				t.Errorf("%s after the failed refresh: %q, %v; want stale v1", x.name, v, err)
			}
			redistest.Recv(t, ctx, tried, x.name+" to try the refresh lock")
		}
		if v, err := cache.Get[string](ctx, a, "k"); !errors.Is(err, cache.ErrStale) || v != "v1" {
			t.Errorf("Get = %q, %v; want v1 with ErrStale", v, err)
		}
		_ = a.Close() // waits for the refresh attempts, so the counters are final
		_ = b.Close()
		if fails.Load() != 1 || calls.Load() != 0 {
			t.Errorf("failing loader ran %d times, later loaders %d; want 1 and 0 (RefreshBackoff)", fails.Load(), calls.Load())
		}
		mu.Lock()
		defer mu.Unlock()
		if len(loadEvents) != 2 || loadEvents[0].Err != nil || !errors.Is(loadEvents[1].Err, boom) || loadEvents[1].Key != "k" {
			t.Errorf("load events = %+v; want a successful load, then one failing with %v for k", loadEvents, boom)
		}
		// Two stale hits of GetOrLoad, and Get's (Get counts in Stats too).
		if st := a.Stats(); st.StaleHits != 3 || st.Refreshes != 1 || st.LoadErrors != 1 || st.LockContention != 1 {
			t.Errorf("stats = %+v; want 3 stale hits (2 GetOrLoad, 1 Get), 1 refresh, 1 load error, 1 contention", st)
		}
		if st := b.Stats(); st.StaleHits != 1 || st.Loads != 0 || st.LockContention != 1 {
			t.Errorf("other cache stats = %+v; want 1 stale hit, no load, 1 contention", st)
		}
	})
}

// TestGetOrLoad_negative: loader.ErrNotFound is remembered for
// NegativeTTL, in every Cache, and not at all without it.
func TestGetOrLoad_negative(t *testing.T) {
	tests := []struct {
		name      string
		negative  time.Duration
		wantLoads int32
		wantGet   error
	}{
		{"remembered", time.Minute, 1, cache.ErrNotFound},
		{"not remembered", 0, 3, cache.ErrMiss},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testCtx(t)
				clk := newClock()
				opts := cache.Options{Namespace: namespace(t), NegativeTTL: tt.negative, Now: clk.Now}
				rc := s.Client(t)
				a, b := newCacheOn(t, rc, &opts), newCacheOn(t, rc, &opts)
				var loads atomic.Int32
				notFound := func(context.Context) (user, error) {
					loads.Add(1)
					return user{}, fmt.Errorf("user 9: %w", loader.ErrNotFound)
				}
				for i, c := range []*cache.Cache{a, a, b} {
					if v, err := cache.GetOrLoad(ctx, c, "user:9", notFound); !errors.Is(err, cache.ErrNotFound) || v != (user{}) {
						t.Fatalf("call %d: %+v, %v; want ErrNotFound", i, v, err)
					}
				}
				if n := loads.Load(); n != tt.wantLoads {
					t.Errorf("%d loads, want %d", n, tt.wantLoads)
				}
				if _, err := cache.Get[user](ctx, a, "user:9"); !errors.Is(err, tt.wantGet) {
					t.Errorf("Get: %v, want %v", err, tt.wantGet)
				}
				if tt.negative == 0 {
					return
				}
				// Past NegativeTTL the loader runs again, and its value is kept.
				clk.Advance(2 * tt.negative)
				v, err := cache.GetOrLoad(ctx, a, "user:9", func(context.Context) (user, error) { loads.Add(1); return user{9, "ida"}, nil })
				if err != nil || v != (user{9, "ida"}) || loads.Load() != tt.wantLoads+1 {
					t.Errorf("after NegativeTTL: %+v, %v, %d loads; want a new load", v, err, loads.Load())
				}
			})
		}
	})
}

// TestGetOrLoad_panickingLoader: a panic reaches every concurrent caller as
// a *loader.PanicError (and a waiter in another Cache as ErrRemoteLoad),
// the claim is released, and the next call loads at once.
func TestGetOrLoad_panickingLoader(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		rc := s.Client(t)
		a := newCacheOn(t, rc, &cache.Options{Namespace: ns})
		b := newCacheOn(t, rc, &cache.Options{Namespace: ns, PollInterval: 10 * time.Second, WaitTimeout: 20 * time.Second})
		boom := errors.New("boom")
		started := make(chan struct{})
		release, open := gate(t)
		var loads atomic.Int32
		panicky := func(ctx context.Context) (int, error) {
			if loads.Add(1) == 1 {
				close(started)
			}
			select {
			case <-release:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			panic(boom)
		}
		const callers = 8
		results := []<-chan result[int]{goGetOrLoad(ctx, a, "k", panicky)}
		redistest.Recv(t, ctx, started, "the load to start")
		for range callers - 1 {
			results = append(results, goGetOrLoad(ctx, a, "k", panicky))
		}
		var bLoads atomic.Int32
		remote := goGetOrLoad(ctx, b, "k", neverLoad[int](&bLoads))
		redistest.WaitFor(t, ctx, "the other cache to wait", func() bool { return b.Stats().Waits == 1 })
		redistest.WaitFor(t, ctx, "the callers to join", func() bool { return a.Stats().Misses == callers })
		open()

		for i, ch := range results {
			r := redistest.Recv(t, ctx, ch, fmt.Sprintf("caller %d", i))
			var pe *loader.PanicError
			if !errors.As(r.err, &pe) || pe.Value != boom || !errors.Is(r.err, boom) || len(pe.Stack) == 0 {
				t.Errorf("caller %d: %d, %v; want a *loader.PanicError carrying boom and a stack", i, r.v, r.err)
			}
		}
		r := redistest.Recv(t, ctx, remote, "the other cache")
		if !errors.Is(r.err, cache.ErrRemoteLoad) || !strings.Contains(r.err.Error(), "boom") || bLoads.Load() != 0 {
			t.Errorf("other cache: %v (%d own loads); want ErrRemoteLoad naming boom", r.err, bLoads.Load())
		}
		if n, err := rc.Exists(ctx, valueKey(ns, "k")).Result(); err != nil || n != 0 {
			t.Errorf("claim left behind after the panic: EXISTS = %d, %v", n, err)
		}

		before := a.Stats()
		if v, err := cache.GetOrLoad(ctx, a, "k", func(context.Context) (int, error) { return 7, nil }); err != nil || v != 7 {
			t.Fatalf("call after the panic: %d, %v", v, err)
		}
		after := a.Stats()
		if after.Loads != before.Loads+1 || after.Waits != 0 || after.LockContention != 0 {
			t.Errorf("stats after the panic %+v, before %+v; want one more load and no wait", after, before)
		}
	})
}

// TestGetOrLoad_noStaleSet: a rebuild that raced a Delete or a Set does
// not overwrite it; its caller still gets the loaded value.
func TestGetOrLoad_noStaleSet(t *testing.T) {
	tests := []struct {
		name    string
		stale   bool                                      // rebuild is a stale refresh, not a miss
		meddle  func(context.Context, *cache.Cache) error // runs while the loader is blocked
		wantGet func(t *testing.T, v string, err error)   // what Get returns afterwards
	}{
		{
			name:   "delete during load",
			meddle: func(ctx context.Context, c *cache.Cache) error { return c.Delete(ctx, "k") },
			wantGet: func(t *testing.T, v string, err error) {
				if !errors.Is(err, cache.ErrMiss) {
					t.Errorf("Get after Delete = %q, %v; want ErrMiss", v, err)
				}
			},
		},
		{
			name:   "set during load",
			meddle: func(ctx context.Context, c *cache.Cache) error { return cache.Set(ctx, c, "k", "set") },
			wantGet: func(t *testing.T, v string, err error) {
				if err != nil || v != "set" {
					t.Errorf("Get after Set = %q, %v; want set", v, err)
				}
			},
		},
		{
			name:   "delete during stale refresh",
			stale:  true,
			meddle: func(ctx context.Context, c *cache.Cache) error { return c.Delete(ctx, "k") },
			wantGet: func(t *testing.T, v string, err error) {
				if !errors.Is(err, cache.ErrMiss) {
					t.Errorf("Get after Delete = %q, %v; want ErrMiss", v, err)
				}
			},
		},
		{
			name:   "set during stale refresh",
			stale:  true,
			meddle: func(ctx context.Context, c *cache.Cache) error { return cache.Set(ctx, c, "k", "set") },
			wantGet: func(t *testing.T, v string, err error) {
				if err != nil || v != "set" {
					t.Errorf("Get after Set = %q, %v; want set", v, err)
				}
			},
		},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testCtx(t)
				clk := newClock()
				ns := namespace(t)
				rc := s.Client(t)
				c := newCacheOn(t, rc, &cache.Options{Namespace: ns, TTL: time.Minute, StaleTTL: 10 * time.Minute, Now: clk.Now})
				reader := newCacheOn(t, rc, &cache.Options{Namespace: ns, TTL: time.Minute, StaleTTL: 10 * time.Minute, Now: clk.Now})
				if tt.stale {
					if _, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) { return "old", nil }); err != nil {
						t.Fatal(err)
					}
					clk.Advance(2 * time.Minute)
				}
				started := make(chan struct{})
				release, open := gate(t)
				load := func(context.Context) (string, error) {
					close(started)
					<-release // ignores ctx: Close below must not stop it
					return "loaded", nil
				}
				res := goGetOrLoad(ctx, c, "k", load)
				want := "loaded"
				if tt.stale {
					want = "old"
					if r := redistest.Recv(t, ctx, res, "the stale value"); r.err != nil || r.v != "old" {
						t.Fatalf("stale call: %q, %v", r.v, r.err)
					}
				}
				redistest.Recv(t, ctx, started, "the load to start")
				if err := tt.meddle(ctx, c); err != nil {
					t.Fatal(err)
				}
				open()
				if !tt.stale {
					if r := redistest.Recv(t, ctx, res, "the loading caller"); r.err != nil || r.v != want {
						t.Errorf("loading caller got %q, %v; want %q", r.v, r.err, want)
					}
				}
				_ = c.Close() // waits for the rebuild's write (or its skip)
				v, err := cache.Get[string](ctx, reader, "k")
				tt.wantGet(t, v, err)
				if st := c.Stats(); st.WritesSkipped != 1 {
					t.Errorf("stats = %+v; want 1 write skipped", st)
				}
				if n, err := rc.Exists(ctx, valueKey(ns, "k")+":lock").Result(); err != nil || n != 0 {
					t.Errorf("rebuild lock left behind: EXISTS = %d, %v", n, err)
				}
			})
		}
	})
}

// TestGetOrLoad_corruptEntry: bytes under the value key that are not an
// entry this version can read as the caller's type are a miss: the loader
// runs, its value replaces them and the caller gets no error.
func TestGetOrLoad_corruptEntry(t *testing.T) {
	envelope := func(version byte, payload []byte) string {
		now := time.Now()
		b := codec.Append(nil, codec.Entry{Written: now, FreshUntil: now.Add(time.Hour), Payload: payload})
		b[1] = version
		return string(b)
	}
	str, err := msgpack.Marshal("not a user")
	if err != nil {
		t.Fatal(err)
	}
	good, err := msgpack.Marshal(user{3, "old"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		raw  string
	}{
		{"garbage", "\x00\xffgarbage\x01\x02 not an entry at all"},
		{"empty", ""},
		{"bare msgpack", string(good)},
		{"truncated header", envelope(1, good)[:10]},
		{"envelope of another type", envelope(1, str)},
		{"envelope of a future version", envelope(2, good)},
		{"envelope with unknown flags", func() string { b := []byte(envelope(1, good)); b[2] = 0x80; return string(b) }()},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testCtx(t)
				ns := namespace(t)
				c, rc := newCache(t, s, &cache.Options{Namespace: ns})
				if err := rc.Set(ctx, valueKey(ns, "k"), tt.raw, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				var loads atomic.Int32
				load := func(context.Context) (user, error) { loads.Add(1); return user{3, "new"}, nil }
				if v, err := cache.GetOrLoad(ctx, c, "k", load); err != nil || v != (user{3, "new"}) {
					t.Fatalf("GetOrLoad over %s = %+v, %v; want the loaded value", tt.name, v, err)
				}
				var calls atomic.Int32
				if v, err := cache.GetOrLoad(ctx, c, "k", neverLoad[user](&calls)); err != nil || v != (user{3, "new"}) {
					t.Errorf("second call = %+v, %v; want a hit", v, err)
				}
				raw, err := rc.Get(ctx, valueKey(ns, "k")).Bytes()
				if err != nil {
					t.Fatal(err)
				}
				var got user
				if e, err := codec.Decode(raw); err != nil || msgpack.Unmarshal(e.Payload, &got) != nil || got != (user{3, "new"}) {
					t.Errorf("stored entry %q not replaced by the loaded value (%v)", raw, err)
				}
				if st := c.Stats(); loads.Load() != 1 || st.DecodeFailures == 0 || st.Hits != 1 {
					t.Errorf("loads %d, stats %+v; want 1 load, decode failures counted, 1 hit", loads.Load(), st)
				}
			})
		}
	})
}

// TestGetOrLoad_failOpen: with the server dead, GetOrLoad still serves
// loaded values, paying for the dead server once per FailOpenCooldown;
// after the cool-down the revived server is used again.
func TestGetOrLoad_failOpen(t *testing.T) {
	s := redistest.Start(t, redistest.Redis8)
	ctx := testCtx(t)
	clk := newClock()
	// go-redis stops dialling for a while once a pool has seen PoolSize
	// failed dials (the subscription's reconnects count too); a large pool
	// keeps that breaker out of this test.
	rc := redis.NewClient(&redis.Options{Addr: s.Addrs()[0], PoolSize: 1000})
	t.Cleanup(func() { _ = rc.Close() })
	rec := record(rc)
	const cooldown = time.Minute
	c := newCacheOn(t, rc, &cache.Options{FailOpenCooldown: cooldown, Now: clk.Now})
	var loads atomic.Int32
	load := func(context.Context) (int, error) { return int(loads.Add(1)), nil }
	if v, err := cache.GetOrLoad(ctx, c, "k", load); err != nil || v != 1 {
		t.Fatalf("before the kill: %d, %v", v, err)
	}

	s.Kill()
	rec.reset()
	for i := range 5 {
		v, err := cache.GetOrLoad(ctx, c, "k", load)
		if err != nil || v != i+2 {
			t.Fatalf("call %d with the server dead: %d, %v; want a fresh load", i, v, err)
		}
	}
	if cmds := rec.reset(); len(cmds) != 1 || cmds[0][0] != "get" {
		t.Errorf("with the server dead, 5 calls sent %q; want the one GET that failed", cmds)
	}
	st := c.Stats()
	if st.FailOpenLoads != 5 || st.ServerErrors != 1 || st.Loads != 6 {
		t.Errorf("stats = %+v; want 5 fail-open loads and 1 server error", st)
	}

	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if v, err := cache.GetOrLoad(ctx, c, "k", load); err != nil || v != 7 || len(rec.reset()) != 0 {
		t.Errorf("within the cool-down: %d, %v; want a fail-open load without server calls", v, err)
	}
	clk.Advance(cooldown + time.Second)
	if v, err := cache.GetOrLoad(ctx, c, "k", load); err != nil || v != 8 {
		t.Fatalf("after the cool-down: %d, %v", v, err)
	}
	var calls atomic.Int32
	if v, err := cache.GetOrLoad(ctx, c, "k", neverLoad[int](&calls)); err != nil || v != 8 {
		t.Errorf("after the cool-down, second call: %d, %v; want the stored 8", v, err)
	}
	st = c.Stats()
	if st.FailOpenLoads != 6 || st.ServerErrors != 1 || st.Hits != 1 {
		t.Errorf("stats = %+v; want 6 fail-open loads, still 1 server error, 1 hit", st)
	}
}

// TestGetOrLoad_earlyRefresh: with XFetch on, a fresh hit on a value whose
// load took time refreshes it in the background before it expires; with
// beta 0 it never does.
func TestGetOrLoad_earlyRefresh(t *testing.T) {
	tests := []struct {
		name    string
		beta    float64
		refresh bool
	}{
		{"beta 0", 0, false},
		{"large beta", 1e9, true},
		{"huge beta", 1e300, true}, // the gap overflows a time.Duration
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testCtx(t)
				ns := namespace(t)
				rc := s.Client(t)
				rec := record(rc)
				c := newCacheOn(t, rc, &cache.Options{Namespace: ns, TTL: time.Minute, EarlyRefresh: tt.beta})
				var loads atomic.Int32
				load := func(ctx context.Context) (int, error) {
					n := loads.Add(1)
					select { // a query that takes a few milliseconds
					case <-time.After(5 * time.Millisecond):
					case <-ctx.Done():
						return 0, ctx.Err()
					}
					return int(n), nil
				}
				if v, err := cache.GetOrLoad(ctx, c, "k", load); err != nil || v != 1 {
					t.Fatalf("first call: %d, %v", v, err)
				}
				announced := signalAnnounced(rec, ns, "k")
				rec.reset()
				const hits = 20
				for i := range hits {
					if i > 0 && tt.refresh {
						break
					}
					if v, err := cache.GetOrLoad(ctx, c, "k", load); err != nil || v != 1 {
						t.Fatalf("hit %d: %d, %v; want the first value, fresh", i, v, err)
					}
				}
				if !tt.refresh {
					for _, cmd := range rec.reset() {
						if cmd[0] != "get" {
							t.Errorf("beta 0: a fresh hit led to %q", cmd)
						}
					}
					if st := c.Stats(); st.Refreshes != 0 || loads.Load() != 1 || st.Hits != hits {
						t.Errorf("stats = %+v, %d loads; want no refresh", st, loads.Load())
					}
					return
				}
				redistest.Recv(t, ctx, announced, "the early refresh to write")
				if v, err := cache.Get[int](ctx, c, "k"); err != nil || v != 2 {
					t.Errorf("Get after the early refresh = %d, %v; want 2", v, err)
				}
				// One fresh hit of GetOrLoad, then Get's (Get counts in Stats too).
				if st := c.Stats(); st.Refreshes != 1 || loads.Load() != 2 || st.Hits != 2 || st.StaleHits != 0 {
					t.Errorf("stats = %+v, %d loads; want 1 refresh of a fresh value, 2 hits (GetOrLoad, Get)", st, loads.Load())
				}
			})
		}
	})
}

// TestGetOrLoad_ttlJitter: TTLJitter shortens each entry's fresh time by
// a random fraction up to TTLJitter; the key's TTL is that plus StaleTTL.
func TestGetOrLoad_ttlJitter(t *testing.T) {
	const ttl, stale = 100 * time.Second, 20 * time.Second
	tests := []struct {
		name      string
		jitter    float64
		minSpread time.Duration
		maxSpread time.Duration
	}{
		{"no jitter", 0, 0, 2 * time.Second},
		{"jitter 0.5", 0.5, 5 * time.Second, ttl},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testCtx(t)
				ns := namespace(t)
				c, rc := newCache(t, s, &cache.Options{Namespace: ns, TTL: ttl, StaleTTL: stale, TTLJitter: tt.jitter})
				const n = 20
				lo := time.Duration(float64(ttl)*(1-tt.jitter)) + stale - 2*time.Second // 2s for the test's own time
				hi := ttl + stale
				lowest, highest := hi, time.Duration(0)
				for i := range n {
					key := fmt.Sprintf("k%d", i)
					var err error
					if i%2 == 0 {
						err = cache.Set(ctx, c, key, i)
					} else {
						_, err = cache.GetOrLoad(ctx, c, key, func(context.Context) (int, error) { return i, nil })
					}
					if err != nil {
						t.Fatal(err)
					}
					pttl, err := rc.PTTL(ctx, valueKey(ns, key)).Result()
					if err != nil {
						t.Fatal(err)
					}
					if pttl < lo || pttl > hi {
						t.Errorf("%s: PTTL %v outside [%v, %v]", key, pttl, lo, hi)
					}
					raw, err := rc.Get(ctx, valueKey(ns, key)).Bytes()
					if err != nil {
						t.Fatal(err)
					}
					e, err := codec.Decode(raw)
					if fresh := e.FreshUntil.Sub(e.Written); err != nil || fresh > ttl || fresh < time.Duration(float64(ttl)*(1-tt.jitter))-time.Millisecond {
						t.Errorf("%s: fresh for %v (%v); want within [%v, %v]", key, fresh, err, time.Duration(float64(ttl)*(1-tt.jitter)), ttl)
					}
					lowest, highest = min(lowest, pttl), max(highest, pttl)
				}
				if spread := highest - lowest; spread < tt.minSpread || spread > tt.maxSpread {
					t.Errorf("PTTLs spread over %v (%v..%v); want %v..%v", spread, lowest, highest, tt.minSpread, tt.maxSpread)
				}
			})
		}
	})
}

// TestGetOrLoad_awkwardKeys: long, braced and binary keys work everywhere
// (on a cluster the value and lock keys must share a slot, which Delete's
// two-key DEL checks) and distinct keys stay distinct.
func TestGetOrLoad_awkwardKeys(t *testing.T) {
	long := strings.Repeat("x", 200)
	keys := []string{
		strings.Repeat("x", redisx.MaxPlainKey), strings.Repeat("x", redisx.MaxPlainKey+1),
		long + "a", long + "b", "{tag}", "{tag}x", "a}{b", "{", "}", "{}",
		"a\x00b", "a\x00c", "\x00", "with space", "ünïcödé", "#short", redisx.Tag(long + "a"),
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newCache(t, s, nil)
		for _, k := range keys {
			if v, err := cache.GetOrLoad(ctx, c, k, func(context.Context) (string, error) { return k, nil }); err != nil || v != k {
				t.Fatalf("GetOrLoad(%.20q) = %.20q, %v", k, v, err)
			}
		}
		var calls atomic.Int32
		for _, k := range keys {
			if v, err := cache.GetOrLoad(ctx, c, k, neverLoad[string](&calls)); err != nil || v != k {
				t.Errorf("second GetOrLoad(%.20q) = %.20q, %v; want a hit", k, v, err)
			}
		}
		if st := c.Stats(); st.Loads != uint64(len(keys)) || calls.Load() != 0 {
			t.Errorf("stats = %+v; want %d loads", st, len(keys))
		}
		for i, k := range keys {
			if i%2 == 0 {
				if err := c.Delete(ctx, k); err != nil {
					t.Errorf("Delete(%.20q): %v", k, err)
				}
			}
		}
		for i, k := range keys {
			v, err := cache.Get[string](ctx, c, k)
			switch {
			case i%2 == 0 && !errors.Is(err, cache.ErrMiss):
				t.Errorf("Get(%.20q) after Delete = %.20q, %v; want ErrMiss", k, v, err)
			case i%2 == 1 && (err != nil || v != k):
				t.Errorf("Get(%.20q) = %.20q, %v; want its own value", k, v, err)
			}
		}
	})
}

// TestGetOrLoad_waitTimeout: a Cache that waits for another's load gives
// up after WaitTimeout with ErrWaitTimeout, or loads on its own (without
// storing) with LoadOnWaitTimeout.
func TestGetOrLoad_waitTimeout(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		rc := s.Client(t)
		a := newCacheOn(t, rc, &cache.Options{Namespace: ns})
		short := cache.Options{Namespace: ns, WaitTimeout: 300 * time.Millisecond, PollInterval: 50 * time.Millisecond}
		b := newCacheOn(t, rc, &short)
		short.LoadOnWaitTimeout = true
		own := newCacheOn(t, rc, &short)

		started := make(chan struct{})
		release, open := gate(t)
		holder := goGetOrLoad(ctx, a, "k", heldLoader(started, release, "a"))
		redistest.Recv(t, ctx, started, "cache a to claim the key and load")

		var calls atomic.Int32
		if v, err := cache.GetOrLoad(ctx, b, "k", neverLoad[string](&calls)); !errors.Is(err, cache.ErrWaitTimeout) {
			t.Errorf("waiting cache: %q, %v; want ErrWaitTimeout", v, err)
		}
		if st := b.Stats(); st.Waits != 1 || st.WaitTimeouts != 1 || st.Loads != 0 || calls.Load() != 0 {
			t.Errorf("waiting cache stats = %+v; want 1 wait, 1 timeout, no load", st)
		}
		if v, err := cache.GetOrLoad(ctx, own, "k", func(context.Context) (string, error) { return "own", nil }); err != nil || v != "own" {
			t.Errorf("LoadOnWaitTimeout cache: %q, %v; want its own load", v, err)
		}
		if st := own.Stats(); st.WaitTimeouts != 1 || st.Loads != 1 {
			t.Errorf("LoadOnWaitTimeout stats = %+v; want 1 timeout, 1 load", st)
		}

		open()
		if r := redistest.Recv(t, ctx, holder, "cache a's load"); r.err != nil || r.v != "a" {
			t.Fatalf("cache a: %q, %v", r.v, r.err)
		}
		if v, err := cache.Get[string](ctx, b, "k"); err != nil || v != "a" {
			t.Errorf("Get = %q, %v; want a (a timed-out waiter's own load is not stored)", v, err)
		}
	})
}

// TestGetOrLoad_remoteFailure: a Cache waiting for another's load learns
// of its failure from the announcement, at once, not by timing out.
func TestGetOrLoad_remoteFailure(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		rc := s.Client(t)
		a := newCacheOn(t, rc, &cache.Options{Namespace: ns})
		// Polls and the wait limit lie far beyond the test: only the
		// announcement can end the wait with ErrRemoteLoad.
		var waitEvents atomic.Int32
		b := newCacheOn(t, rc, &cache.Options{Namespace: ns, PollInterval: 30 * time.Second, WaitTimeout: time.Minute,
			Observer: func(e cache.Event) {
				if e.Kind == cache.EventWait && errors.Is(e.Err, cache.ErrRemoteLoad) {
					waitEvents.Add(1)
				}
			}})

		started := make(chan struct{})
		fail, open := gate(t)
		holder := goGetOrLoad(ctx, a, "k", func(context.Context) (string, error) {
			close(started)
			<-fail
			return "", errors.New("upstream answered 503")
		})
		redistest.Recv(t, ctx, started, "cache a to claim the key and load")
		var calls atomic.Int32
		waiter := goGetOrLoad(ctx, b, "k", neverLoad[string](&calls))
		redistest.WaitFor(t, ctx, "cache b to wait", func() bool { return b.Stats().Waits == 1 })
		open()

		if r := redistest.Recv(t, ctx, holder, "cache a"); r.err == nil || !strings.Contains(r.err.Error(), "upstream answered 503") {
			t.Errorf("cache a: %q, %v; want its loader's error", r.v, r.err)
		}
		r := redistest.Recv(t, ctx, waiter, "cache b")
		if !errors.Is(r.err, cache.ErrRemoteLoad) || !strings.Contains(r.err.Error(), "upstream answered 503") {
			t.Errorf("cache b: %q, %v; want ErrRemoteLoad with a's error text", r.v, r.err)
		}
		if st := b.Stats(); st.WaitTimeouts != 0 || st.Loads != 0 || calls.Load() != 0 || waitEvents.Load() != 1 {
			t.Errorf("cache b stats = %+v, %d wait events; want no timeout, no load, one EventWait with ErrRemoteLoad", st, waitEvents.Load())
		}
		// The failure is not stored: the next call loads.
		if v, err := cache.GetOrLoad(ctx, b, "k", func(context.Context) (string, error) { return "b", nil }); err != nil || v != "b" {
			t.Errorf("next call: %q, %v; want a new load", v, err)
		}
	})
}

// TestGetOrLoad_waitEndedByRead: a wait that ends by reading the key
// again, because the value was too large to come with the announcement,
// is reported as one EventWait with its duration, as a wait answered by
// the announcement is.
func TestGetOrLoad_waitEndedByRead(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		rc := s.Client(t)
		a := newCacheOn(t, rc, &cache.Options{Namespace: ns})
		var waits atomic.Int32
		var waited atomic.Int64
		b := newCacheOn(t, rc, &cache.Options{Namespace: ns, PollInterval: 30 * time.Second, WaitTimeout: time.Minute,
			Observer: func(e cache.Event) {
				if e.Kind == cache.EventWait && e.Err == nil {
					waits.Add(1)
					waited.Store(int64(e.Duration))
				}
			}})
		big := strings.Repeat("v", 64<<10) // far over what an announcement carries
		started := make(chan struct{})
		release, open := gate(t)
		holder := goGetOrLoad(ctx, a, "k", func(context.Context) (string, error) {
			close(started)
			<-release
			return big, nil
		})
		redistest.Recv(t, ctx, started, "cache a to claim the key and load")
		var calls atomic.Int32
		waiter := goGetOrLoad(ctx, b, "k", neverLoad[string](&calls))
		redistest.WaitFor(t, ctx, "cache b to wait", func() bool { return b.Stats().Waits == 1 })
		open()
		if r := redistest.Recv(t, ctx, holder, "cache a"); r.err != nil || r.v != big {
			t.Fatalf("cache a: %d bytes, %v", len(r.v), r.err)
		}
		if r := redistest.Recv(t, ctx, waiter, "cache b"); r.err != nil || r.v != big {
			t.Fatalf("cache b: %d bytes, %v; want a's value", len(r.v), r.err)
		}
		if n := waits.Load(); n != 1 || waited.Load() <= 0 || calls.Load() != 0 {
			t.Errorf("%d EventWait (last %v), %d loads by b; want one wait with its duration, no load", n, time.Duration(waited.Load()), calls.Load())
		}
	})
}

// TestGetOrLoad_loadedValueTooLarge: a loaded value above MaxValueSize is
// returned as ErrValueTooLarge and not stored; the claim is freed.
func TestGetOrLoad_loadedValueTooLarge(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		c, rc := newCache(t, s, &cache.Options{Namespace: ns, MaxValueSize: 64})
		_, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) { return strings.Repeat("x", 100), nil })
		if !errors.Is(err, cache.ErrValueTooLarge) {
			t.Errorf("err = %v, want ErrValueTooLarge", err)
		}
		if n, err := rc.Exists(ctx, valueKey(ns, "k")).Result(); err != nil || n != 0 {
			t.Errorf("EXISTS = %d, %v; want nothing stored, no claim left", n, err)
		}
		if v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) { return "small", nil }); err != nil || v != "small" {
			t.Errorf("next call: %q, %v", v, err)
		}
	})
}
