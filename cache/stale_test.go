package cache_test

import (
	"context"
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
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/vmihailenco/msgpack/v5"
)

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
				opts := cache.Options{Namespace: namespace(t), Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute}, Now: clk.Now}
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
				clk.Advance(2 * time.Minute) // past TTL, within Expiry.Stale

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
		opts := cache.Options{Namespace: namespace(t), Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute}, Now: clk.Now}
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
		// Cache 0 serves stale too and refreshes the value completely: it
		// writes, announces, and then frees the lock.
		announced := signalAnnounced(rec0, opts.Namespace, "k")
		if v, err := cache.GetOrLoad(ctx, c0, "k", load); err != nil || v != 1 {
			t.Fatalf("cache 0 while stale: %d, %v", v, err)
		}
		redistest.Recv(t, ctx, announced, "cache 0's refresh to finish")
		redistest.WaitFor(t, ctx, "cache 0's refresh to free the lock", func() bool {
			n, err := rc0.Exists(ctx, lockKey).Result()
			return err == nil && n == 0
		})
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
// Cache within Expiry.RefreshBackoff.
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
		opts := cache.Options{Namespace: ns, Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute, RefreshBackoff: 10 * time.Minute}, Now: clk.Now}
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
		// held for Expiry.RefreshBackoff.
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
			t.Errorf("failing loader ran %d times, later loaders %d; want 1 and 0 (Expiry.RefreshBackoff)", fails.Load(), calls.Load())
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
				c := newCacheOn(t, rc, &cache.Options{Namespace: ns, Expiry: cache.ExpiryPolicy{Fresh: time.Minute, EarlyRefresh: tt.beta}})
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

// TestGetOrLoad_notFoundEndsStaleValue (issue 10, #11): when the refresh of
// a stale value finds the row gone (loader.ErrNotFound), the stale value is
// no longer served: it is deleted, or replaced by a negative entry with
// Expiry.Negative, and the refresh is not started again and again. The end is
// conditional, as every other write: a Set that came during the refresh
// stands.
func TestGetOrLoad_notFoundEndsStaleValue(t *testing.T) {
	tests := []struct {
		name         string
		negative     time.Duration
		setMeanwhile bool
		large        bool  // compared by digest
		wantGet      error // Get after the refresh
	}{
		{name: "no Expiry.Negative", wantGet: cache.ErrMiss},
		{name: "no Expiry.Negative, large value", large: true, wantGet: cache.ErrMiss},
		{name: "Expiry.Negative", negative: time.Minute, wantGet: loader.ErrNotFound},
		{name: "no Expiry.Negative, Set during refresh", setMeanwhile: true},
		{name: "Expiry.Negative, Set during refresh", negative: time.Minute, setMeanwhile: true},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testCtx(t)
				clk := newClock()
				opts := cache.Options{Namespace: namespace(t), Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: time.Hour, Negative: tt.negative}, Now: clk.Now}
				rc := s.Client(t)
				c, other := newCacheOn(t, rc, &opts), newCacheOn(t, rc, &opts)
				row := "deleted row"
				if tt.large {
					row += randomString(t, 10<<10)
				}
				if err := cache.Set(ctx, c, "row", row); err != nil {
					t.Fatal(err)
				}
				clk.Advance(2 * time.Minute) // stale

				var loads atomic.Int32
				gone := func(ctx context.Context) (string, error) {
					loads.Add(1)
					if tt.setMeanwhile && loads.Load() == 1 {
						if err := cache.Set(ctx, other, "row", "set meanwhile"); err != nil {
							return "", err
						}
					}
					return "", fmt.Errorf("row: %w", loader.ErrNotFound)
				}
				// The first call is served stale and starts the refresh.
				if v, err := cache.GetOrLoad(ctx, c, "row", gone); err != nil || v != row {
					t.Fatalf("stale call = %.20q, %v; want the stale value", v, err)
				}
				redistest.WaitFor(t, ctx, "the refresh to end", func() bool {
					return c.Stats().Refreshes == 1 && !cache.RefreshRunning(c, "row")
				})
				if tt.setMeanwhile {
					if v, err := cache.Get[string](ctx, c, "row"); err != nil || v != "set meanwhile" {
						t.Fatalf("Get = %q, %v; want the value Set during the refresh", v, err)
					}
					if st := c.Stats(); st.WritesSkipped != 1 {
						t.Errorf("WritesSkipped = %d, want 1", st.WritesSkipped)
					}
					return
				}
				if v, err := cache.Get[string](ctx, c, "row"); !errors.Is(err, tt.wantGet) {
					t.Fatalf("Get after the refresh = %.20q, %v; want %v", v, err, tt.wantGet)
				}
				const calls = 5
				for i := range calls {
					if v, err := cache.GetOrLoad(ctx, c, "row", gone); !errors.Is(err, loader.ErrNotFound) {
						t.Fatalf("call %d after the refresh = %.20q, %v; want ErrNotFound", i, v, err)
					}
				}
				_ = c.Close() // waits for any background work, so the counts are final
				want := int32(1)
				if tt.negative == 0 {
					want += calls // each call is a miss, as for any key the loader does not find
				}
				if n := loads.Load(); n != want {
					t.Errorf("%d loads, want %d", n, want)
				}
				if st := c.Stats(); st.Refreshes != 1 || st.StaleHits != 1 {
					t.Errorf("stats %+v; want 1 refresh and 1 stale hit", st)
				}
			})
		}
	}, redistest.Redis8, redistest.Redis7)
}

// A fresh value of another type under the key is replaced, not returned
// as a decode error until it expires.
func TestGetOrLoad_otherTypeIsReplaced(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newCache(t, s, nil)
		if err := cache.Set(ctx, c, "k", "a string"); err != nil {
			t.Fatal(err)
		}
		v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (int, error) { return 42, nil })
		if err != nil || v != 42 {
			t.Fatalf("GetOrLoad[int] over a string = %d, %v; want the loaded 42", v, err)
		}
		if got, err := cache.Get[int](ctx, c, "k"); err != nil || got != 42 {
			t.Errorf("afterwards Get[int] = %d, %v; want the replacement stored", got, err)
		}
	}, redistest.Redis8, redistest.Redis7)
}

// An entry written without a stale window is not served as stale or
// refreshed in the moment between its FreshUntil (computed before the
// write) and the server's expiry (counted from the write's arrival).
func TestGetOrLoad_noStaleWindowStaysFreshUntilGone(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	clk := newClock()
	c, _ := newCache(t, s, &cache.Options{Expiry: cache.ExpiryPolicy{Fresh: time.Minute}, Now: clk.Now})
	if _, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) { return "v", nil }); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute + 100*time.Millisecond) // past FreshUntil; the server keeps it a minute
	var calls atomic.Int32
	v, err := cache.GetOrLoad(ctx, c, "k", neverLoad[string](&calls))
	if err != nil || v != "v" {
		t.Fatalf("GetOrLoad = %q, %v; want the stored value", v, err)
	}
	if v, err := cache.Get[string](ctx, c, "k"); err != nil || v != "v" {
		t.Fatalf("Get = %q, %v; want the value without ErrStale", v, err)
	}
	st := c.Stats() // the fresh hits of GetOrLoad and of Get (Get counts in Stats too)
	if st.Hits != 2 || st.StaleHits != 0 || st.Refreshes != 0 || st.Loads != 1 || calls.Load() != 0 {
		t.Fatalf("stats %+v, loader calls %d; want two fresh hits (GetOrLoad, Get) and no refresh", st, calls.Load())
	}
}
