package cache_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/redis/go-redis/v9"
)

// This file holds the regression tests of issue 10's cache defects
// (hardening): each failed on the code before its fix.

// hundredYears is the longest expiry the cache sends to the server.
const hundredYears = 100 * 365 * 24 * time.Hour

// TestGetOrLoad_foreverDurations (issue 10, #13): durations set huge to
// mean "forever" (TTL, StaleTTL and NegativeTTL in Options, per call, from
// Expire) are clamped, so the value is stored with an expiry the server
// accepts, and the next call is a hit instead of waiting out a claim left
// behind by a failed write.
func TestGetOrLoad_foreverDurations(t *testing.T) {
	const forever = time.Duration(math.MaxInt64)
	tests := []struct {
		name string
		opts cache.Options
		call []cache.Option
		load func(ctx context.Context) (string, error)
	}{
		{name: "Options.StaleTTL", opts: cache.Options{StaleTTL: forever}},
		{name: "Options.TTL and StaleTTL", opts: cache.Options{TTL: forever, StaleTTL: forever}},
		{name: "Options.TTL with jitter", opts: cache.Options{TTL: forever, TTLJitter: 0.5}},
		{name: "WithStaleTTL", call: []cache.Option{cache.WithStaleTTL(forever)}},
		{name: "WithTTL and WithStaleTTL", call: []cache.Option{cache.WithTTL(forever), cache.WithStaleTTL(forever)}},
		{name: "Expire", load: func(ctx context.Context) (string, error) {
			cache.Expire(ctx, forever, forever)
			return "v", nil
		}},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testCtx(t)
				opts := tt.opts
				opts.Namespace = namespace(t)
				opts.LockTTL = time.Minute // a claim left behind would block the second call for this long
				c, rc := newCache(t, s, &opts)
				load := tt.load
				if load == nil {
					load = func(context.Context) (string, error) { return "v", nil }
				}
				if v, err := cache.GetOrLoad(ctx, c, "k", load, tt.call...); err != nil || v != "v" {
					t.Fatalf("GetOrLoad = %q, %v", v, err)
				}
				if v, err := cache.Get[string](ctx, c, "k"); err != nil || v != "v" {
					t.Fatalf("Get after the load = %q, %v; want the value stored", v, err)
				}
				ttl, err := rc.PTTL(ctx, valueKey(opts.Namespace, "k")).Result()
				if err != nil || ttl <= 0 || ttl > hundredYears {
					t.Errorf("stored PTTL = %v, %v; want an expiry within 100 years", ttl, err)
				}
				if st := c.Stats(); st.ServerErrors != 0 || st.Loads != 1 {
					t.Errorf("stats %+v; want 1 load and no server error", st)
				}

				// Set with the same durations stores too, with an expiry.
				if err := cache.Set(ctx, c, "set", "s", tt.call...); err != nil {
					t.Fatalf("Set: %v", err)
				}
				ttl, err = rc.PTTL(ctx, valueKey(opts.Namespace, "set")).Result()
				if err != nil || ttl <= 0 || ttl > hundredYears {
					t.Errorf("PTTL after Set = %v, %v; want an expiry within 100 years", ttl, err)
				}
			})
		}
	}, redistest.Redis8, redistest.Redis7)
}

// TestNew_foreverWaitTimeout (issue 10, #13): a WaitTimeout set huge to mean
// "forever" does not overflow the limit of the background flight (which
// adds LoadTimeout to it) into an already expired context.
func TestNew_foreverWaitTimeout(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	c, _ := newCache(t, s, &cache.Options{WaitTimeout: time.Duration(math.MaxInt64)})
	if v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) { return "v", nil }); err != nil || v != "v" {
		t.Fatalf("GetOrLoad = %q, %v", v, err)
	}
	if v, err := cache.Get[string](ctx, c, "k"); err != nil || v != "v" {
		t.Fatalf("Get = %q, %v; want the value stored", v, err)
	}
}

// TestGetOrLoad_notFoundEndsStaleValue (issue 10, #11): when the refresh of
// a stale value finds the row gone (loader.ErrNotFound), the stale value is
// no longer served: it is deleted, or replaced by a negative entry with
// NegativeTTL, and the refresh is not started again and again. The end is
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
		{name: "no NegativeTTL", wantGet: cache.ErrMiss},
		{name: "no NegativeTTL, large value", large: true, wantGet: cache.ErrMiss},
		{name: "NegativeTTL", negative: time.Minute, wantGet: cache.ErrNotFound},
		{name: "no NegativeTTL, Set during refresh", setMeanwhile: true},
		{name: "NegativeTTL, Set during refresh", negative: time.Minute, setMeanwhile: true},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testCtx(t)
				clk := newClock()
				opts := cache.Options{Namespace: namespace(t), TTL: time.Minute, StaleTTL: time.Hour, NegativeTTL: tt.negative, Now: clk.Now}
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
					if v, err := cache.GetOrLoad(ctx, c, "row", gone); !errors.Is(err, cache.ErrNotFound) {
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

// TestGetOrLoad_callerDeadlineIsNotServerFailure (issue 10, #12): with
// ContextTimeoutEnabled (the caller's deadline becomes the connection's)
// and no retries, callers whose own ctx expires while their GET is on the
// wire are not counted as server failures: the cache does not start failing
// open, and the next caller with time to spare uses the server.
func TestGetOrLoad_callerDeadlineIsNotServerFailure(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	p := startProxy(t, s.Addrs()[0])
	rc := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	t.Cleanup(func() { _ = rc.Close() })
	c := newCacheOn(t, rc, &cache.Options{FailOpenCooldown: time.Hour})
	// A first load settles the capability probe and opens a connection.
	if _, err := cache.GetOrLoad(ctx, c, "warm", func(context.Context) (string, error) { return "w", nil }); err != nil {
		t.Fatal(err)
	}

	// Every reply now takes longer than the callers below allow.
	p.SetLatency(200 * time.Millisecond)
	var calls atomic.Int32
	const impatient = 20
	for i := range impatient {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		_, err := cache.GetOrLoad(cctx, c, "k", neverLoad[string](&calls))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("impatient caller %d: %v; want its own context.DeadlineExceeded", i, err)
		}
	}
	p.SetLatency(0)

	v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) { return "v", nil })
	if err != nil || v != "v" {
		t.Fatalf("patient caller: %q, %v", v, err)
	}
	if st := c.Stats(); st.FailOpenLoads != 0 || st.ServerErrors != 0 {
		t.Errorf("stats %+v; want no server error and no fail-open load: the callers' deadlines were their own", st)
	}
	if v, err := cache.Get[string](ctx, c, "k"); err != nil || v != "v" {
		t.Errorf("Get = %q, %v; want the patient caller's value stored", v, err)
	}
	if calls.Load() != 0 {
		t.Errorf("the impatient callers' loader ran %d times", calls.Load())
	}
}

// TestGetOrLoad_readYourDeleteAcrossProcesses (issue 10, #16): a caller
// that starts after a Delete returned (in any process) does not get a value
// from before the Delete, even by joining a flight of its process that was
// waiting for a rebuild which wrote that value just before the Delete and
// whose announcement arrives after it. The Delete's own notice, which
// would wake that flight, is lost here (see TestDelete_wakesWaitersElsewhere
// for when it arrives).
func TestGetOrLoad_readYourDeleteAcrossProcesses(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		// Polls are off the table: only the announcement ends B's wait.
		opts := cache.Options{Namespace: ns, WaitTimeout: time.Minute, PollInterval: time.Minute}
		rcA := s.Client(t)
		recA := record(rcA)
		a := newCacheOn(t, rcA, &opts)         // process 1: rebuilds
		b := newCacheOn(t, s.Client(t), &opts) // process 2: waits, then reads after the Delete
		rcD := s.Client(t)
		d := newCacheOn(t, rcD, &opts) // process 3: deletes

		// A's announcement is held back until the test lets it go.
		publishing := make(chan struct{}, 1)
		announce, letAnnounce := gate(t)
		recA.onBefore(func(args []string) {
			if isAnnouncement(args, ns) {
				publishing <- struct{}{}
				<-announce
			}
		})

		started := make(chan struct{})
		release, open := gate(t)
		a1 := goGetOrLoad(ctx, a, "k", heldLoader(started, release, "before the Delete"))
		redistest.Recv(t, ctx, started, "A's load to start")
		var calls atomic.Int32
		b1 := goGetOrLoad(ctx, b, "k", neverLoad[string](&calls))
		redistest.WaitFor(t, ctx, "B to wait for A's claim", func() bool { return b.Stats().Waits == 1 })
		open()
		redistest.Recv(t, ctx, publishing, "A to write and announce")
		if v, err := cache.Get[string](ctx, d, "k"); err != nil || v != "before the Delete" {
			t.Fatalf("A's value is not stored: %q, %v", v, err)
		}

		// What Delete does, less its notice to other processes: as if the
		// notice were lost.
		if err := rcD.Del(ctx, valueKey(ns, "k"), valueKey(ns, "k")+":lock").Err(); err != nil {
			t.Fatal(err)
		}
		b2 := goGetOrLoad(ctx, b, "k", func(context.Context) (string, error) { return "loaded after the Delete", nil })
		redistest.WaitFor(t, ctx, "B's second caller to join B's flight", func() bool { return cache.Joined(b, "k") == 2 })
		letAnnounce()

		if r := redistest.Recv(t, ctx, b2, "B's caller after the Delete"); r.err != nil || r.v != "loaded after the Delete" {
			t.Errorf("B's caller after the Delete got %q, %v; want a load after the Delete", r.v, r.err)
		}
		// The callers that began before the Delete may have either value.
		if r := redistest.Recv(t, ctx, a1, "A's caller"); r.err != nil || r.v != "before the Delete" {
			t.Errorf("A's caller got %q, %v", r.v, r.err)
		}
		if r := redistest.Recv(t, ctx, b1, "B's caller before the Delete"); r.err != nil {
			t.Errorf("B's caller before the Delete got %q, %v", r.v, r.err)
		}
		if v, err := cache.Get[string](ctx, d, "k"); err != nil || v != "loaded after the Delete" {
			t.Errorf("stored afterwards: %q, %v; want the load after the Delete", v, err)
		}
		if calls.Load() != 0 {
			t.Errorf("B's first loader ran %d times", calls.Load())
		}
	}, redistest.Redis8, redistest.Redis7)
}

// TestGetOrLoad_readYourDeleteJoiningOwnLoad (issue 10, #16): a caller that
// starts after a Delete in another process returned does not join a load of
// its own process that began before the Delete (the Delete removed that
// load's claim, so its result is not stored): it loads anew.
func TestGetOrLoad_readYourDeleteJoiningOwnLoad(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		opts := cache.Options{Namespace: namespace(t)}
		b := newCacheOn(t, s.Client(t), &opts) // the process that loads and reads
		d := newCacheOn(t, s.Client(t), &opts) // the process that deletes

		started := make(chan struct{})
		release, open := gate(t)
		b1 := goGetOrLoad(ctx, b, "k", heldLoader(started, release, "loaded before the Delete"))
		redistest.Recv(t, ctx, started, "B's load to start")
		if err := d.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		b2 := goGetOrLoad(ctx, b, "k", func(context.Context) (string, error) { return "loaded after the Delete", nil })
		redistest.WaitFor(t, ctx, "B's second caller to join B's load", func() bool { return cache.Joined(b, "k") == 2 })
		open()

		if r := redistest.Recv(t, ctx, b2, "B's caller after the Delete"); r.err != nil || r.v != "loaded after the Delete" {
			t.Errorf("B's caller after the Delete got %q, %v; want a load after the Delete", r.v, r.err)
		}
		if r := redistest.Recv(t, ctx, b1, "B's caller before the Delete"); r.err != nil || r.v != "loaded before the Delete" {
			t.Errorf("B's caller before the Delete got %q, %v; want its own load", r.v, r.err)
		}
		if v, err := cache.Get[string](ctx, d, "k"); err != nil || v != "loaded after the Delete" {
			t.Errorf("stored afterwards: %q, %v; want the load after the Delete", v, err)
		}
		if st := b.Stats(); st.Misses != 2 || st.Coalesced != 1 || st.Loads != 2 || st.WritesSkipped != 1 {
			t.Errorf("stats %+v; want 2 misses, 1 coalesced, 2 loads and the first load's write skipped", st)
		}
	}, redistest.Redis8, redistest.Redis7)
}

// TestDelete_wakesWaitersElsewhere (issue 10, #16): a Delete tells the
// other processes, so that a flight there waiting for a rebuild that the
// Delete overtook reads the key again at once instead of waiting for that
// rebuild's announcement (or a poll): a caller that starts after the
// Delete gets a load made after it without that wait.
func TestDelete_wakesWaitersElsewhere(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		// Polls are off the table, and A's announcement never comes in
		// time: only the Delete's notice can end B's wait.
		opts := cache.Options{Namespace: ns, WaitTimeout: time.Minute, PollInterval: time.Minute}
		rcA := s.Client(t)
		recA := record(rcA)
		a := newCacheOn(t, rcA, &opts)
		b := newCacheOn(t, s.Client(t), &opts)
		d := newCacheOn(t, s.Client(t), &opts)
		publishing := make(chan struct{}, 1)
		announce, letAnnounce := gate(t)
		recA.onBefore(func(args []string) {
			if isAnnouncement(args, ns) {
				publishing <- struct{}{}
				<-announce
			}
		})

		started := make(chan struct{})
		release, open := gate(t)
		a1 := goGetOrLoad(ctx, a, "k", heldLoader(started, release, "before the Delete"))
		redistest.Recv(t, ctx, started, "A's load to start")
		b1 := goGetOrLoad(ctx, b, "k", func(context.Context) (string, error) { return "B's load", nil })
		redistest.WaitFor(t, ctx, "B to wait for A's claim", func() bool { return b.Stats().Waits == 1 })
		open()
		redistest.Recv(t, ctx, publishing, "A to write and announce")

		if err := d.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		b2 := goGetOrLoad(ctx, b, "k", func(context.Context) (string, error) { return "B's load", nil })
		// A hang here (until the announcement or a poll) is the failure.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for name, ch := range map[string]<-chan result[string]{"B's caller before the Delete": b1, "B's caller after the Delete": b2} {
			if r := redistest.Recv(t, wctx, ch, name); r.err != nil || r.v != "B's load" {
				t.Errorf("%s got %q, %v; want B's load, made after the Delete", name, r.v, r.err)
			}
		}
		letAnnounce()
		if r := redistest.Recv(t, ctx, a1, "A's caller"); r.err != nil || r.v != "before the Delete" {
			t.Errorf("A's caller got %q, %v", r.v, r.err)
		}
	}, redistest.Redis8, redistest.Redis7)
}

// TestGetOrLoad_foreverFailOpenCooldown (issue 10, #13): a FailOpenCooldown
// set huge to mean "never retry the server" does not overflow the end of
// the cool-down (Unix nanoseconds) into the past: after the first failure
// no call goes to the server again.
func TestGetOrLoad_foreverFailOpenCooldown(t *testing.T) {
	ctx := testCtx(t)
	rc, rec := deadClient(t)
	c := newCacheOn(t, rc, &cache.Options{FailOpenCooldown: time.Duration(math.MaxInt64)})
	var loads atomic.Int32
	load := func(context.Context) (int32, error) { return loads.Add(1), nil }
	for i := range 3 {
		if v, err := cache.GetOrLoad(ctx, c, "k", load); err != nil || v != int32(i+1) {
			t.Fatalf("call %d: %d, %v; want a fail-open load", i, v, err)
		}
	}
	if cmds := rec.reset(); len(cmds) != 1 {
		t.Errorf("3 calls sent %q; want the one GET that failed", cmds)
	}
	if st := c.Stats(); st.ServerErrors != 1 || st.FailOpenLoads != 3 {
		t.Errorf("stats %+v; want 1 server error and 3 fail-open loads", st)
	}
}
