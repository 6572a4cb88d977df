package cache_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// captureDefault makes slog.Default() log to a new logSink until the test
// ends: what a Cache without a Logger says goes there.
func captureDefault(tb testing.TB) *logSink {
	tb.Helper()
	old := slog.Default()
	logs := newLogSink()
	slog.SetDefault(slog.New(logs))
	tb.Cleanup(func() { slog.SetDefault(old) })
	return logs
}

// TestFailOpen_said: a Cache running without its server says so, once per
// cause and cool-down, with no Logger configured too (slog.Default): at a
// port where an HTTP server answers (the loader ran on every call and
// nothing was said), and at a port where nothing listens. A server
// answering BUSY fails the calls (a reply is not a reason to load without
// the cache), said once too.
func TestFailOpen_said(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (rc redis.UniversalClient, done func())
		want  string // in the one warning
		open  bool   // the calls fail open (else they fail)
	}{
		{"not a Redis server", func(t *testing.T) (redis.UniversalClient, func()) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			t.Cleanup(srv.Close)
			rc := redis.NewClient(&redis.Options{Addr: srv.Listener.Addr().String()})
			t.Cleanup(func() { _ = rc.Close() })
			return rc, func() {}
		}, "Redis protocol", true},
		{"nothing listens", func(t *testing.T) (redis.UniversalClient, func()) {
			s := redistest.Start(t, redistest.Redis8)
			rc := s.Client(t)
			s.Kill()
			return rc, func() {}
		}, "unreachable", true},
		{"BUSY", func(t *testing.T) (redis.UniversalClient, func()) {
			s := redistest.Start(t, redistest.Redis8) // made busy: not shared
			rc := s.Client(t)
			return rc, redistest.Busy(t, s.Addrs()[0])
		}, "BUSY", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			rc, done := tc.start(t)
			defer done()
			logs := captureDefault(t)
			c, err := cache.New(rc, &cache.Options{Namespace: namespace(t), Expiry: cache.ExpiryPolicy{Fresh: time.Minute}, FailOpenCooldown: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			var loads atomic.Int64
			for i := range 5 {
				v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) { loads.Add(1); return "v", nil })
				if tc.open && (err != nil || v != "v") {
					t.Fatalf("call %d: GetOrLoad = %q, %v; want the loader's value (fail open)", i, v, err)
				}
				if !tc.open && err == nil {
					t.Fatalf("call %d: GetOrLoad = %q; want the server's reply", i, v)
				}
			}
			if n := loads.Load(); tc.open && n != 5 {
				t.Fatalf("%d loads in 5 calls without a server, want 5", n)
			}
			var said []string
			for _, m := range logs.all() {
				if strings.HasPrefix(m, "WARN") && strings.Contains(m, tc.want) {
					said = append(said, m)
				}
			}
			if len(said) != 1 {
				t.Errorf("%d warnings naming %q, want 1 (once per cause and cool-down); logged: %q", len(said), tc.want, logs.all())
			}
		})
	}
}

// TestGetOrLoad_failOpenJoinsRefresh: a background refresh of a stale
// value is running its loader when the server goes away, and a GetOrLoad
// of the same key fails open meanwhile: it takes the refresh's load
// rather than running the loader beside it. Once per key per process
// holds while failing open too.
func TestGetOrLoad_failOpenJoinsRefresh(t *testing.T) {
	s := redistest.Start(t, redistest.Redis8) // killed: not shared
	ctx := testCtx(t)
	c := staleCache(t, ctx, s)

	var runs, running, most atomic.Int32
	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	load := func(ctx context.Context) (string, error) {
		runs.Add(1)
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		entered <- struct{}{}
		select {
		case <-release:
			return "new", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	// The stale value is served, and its refresh starts loading.
	if v, err := cache.GetOrLoad(ctx, c, "k", load); err != nil || v != "old" {
		t.Fatalf("GetOrLoad = %q, %v; want the stale value", v, err)
	}
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the refresh did not start its load")
	}
	s.Kill()
	type result struct {
		v   string
		err error
	}
	got := make(chan result, 1)
	go func() {
		v, err := cache.GetOrLoad(ctx, c, "k", load)
		got <- result{v, err}
	}()
	// Either the fail-open call joined the refresh's load, or it runs the
	// loader beside it.
	redistest.WaitFor(t, ctx, "the fail-open call to join the refresh's load or run its own",
		func() bool { return cache.LoadJoiners(c, "k") > 0 || runs.Load() > 1 })
	close(release)
	var r result
	select {
	case r = <-got:
	case <-ctx.Done():
		t.Fatal("the fail-open call did not return")
	}
	// Back (empty), so that the refresh's writes end now, not after
	// their timeout.
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("loader runs %d, at most %d at once; the fail-open call got %q, %v (fail-open loads counted %d)",
		runs.Load(), most.Load(), r.v, r.err, c.Stats().FailOpenLoads)
	if runs.Load() != 1 || most.Load() != 1 {
		t.Errorf("the loader ran %d times, %d at once, for one key in one process; want once: the fail-open call joins the refresh's load", runs.Load(), most.Load())
	}
	if r.err != nil || r.v != "new" {
		t.Errorf("the fail-open call got %q, %v; want the refresh's load, \"new\"", r.v, r.err)
	}
}

// TestGetOrLoad_refreshBesideFailOpen: while a load of a key runs in the
// process (a fail-open one, which began while the server failed), a
// stale read of the key does not start a refresh's load beside it; once
// it ended, the next stale read refreshes.
func TestGetOrLoad_refreshBesideFailOpen(t *testing.T) {
	s := redistest.Start(t, redistest.Redis8)
	ctx := testCtx(t)
	c := staleCache(t, ctx, s)
	var runs atomic.Int32
	load := func(context.Context) (string, error) { runs.Add(1); return "new", nil }

	end := cache.BeginLoad(c, "k")
	if v, err := cache.GetOrLoad(ctx, c, "k", load); err != nil || v != "old" {
		t.Fatalf("GetOrLoad = %q, %v; want the stale value", v, err)
	}
	redistest.WaitFor(t, ctx, "the refresh to end", func() bool { return !cache.RefreshRunning(c, "k") })
	if n := runs.Load(); n != 0 {
		t.Errorf("the refresh ran the loader %d times beside the load in progress; want none", n)
	}
	end()
	if v, err := cache.GetOrLoad(ctx, c, "k", load); err != nil || v != "old" {
		t.Fatalf("GetOrLoad = %q, %v; want the stale value", v, err)
	}
	redistest.WaitFor(t, ctx, "the refresh to end", func() bool { return !cache.RefreshRunning(c, "k") })
	if n := runs.Load(); n != 1 {
		t.Errorf("the refresh after the load ended ran the loader %d times; want once", n)
	}
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

// TestGetOrLoad_failOpenRunBeforeTheRead: a caller whose read reached the
// server and found the key free does not take the result of the flight
// it then joins if that flight loaded without the server (fail open) from
// before the read: the load may predate a Delete the read saw (the failed
// reply that started it was a fact about its moment, not about the reads
// after it). The caller reads again, and loads.
func TestGetOrLoad_failOpenRunBeforeTheRead(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	clk := newClock()
	p := startProxy(t, s.Addrs()[0])
	rc := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, PoolSize: 100})
	t.Cleanup(func() { _ = rc.Close() })
	ns := namespace(t)
	const cooldown = time.Minute
	missed := make(chan string, 8)
	c := newCacheOn(t, rc, &cache.Options{Namespace: ns, FailOpenCooldown: cooldown, Now: clk.Now, Observer: func(ev cache.Event) {
		if ev.Kind == cache.EventMiss || ev.Kind == cache.EventFailOpen {
			missed <- ev.Kind.String() + " " + ev.Key
		}
	}})
	other := newCacheOn(t, s.Client(t), &cache.Options{Namespace: ns})
	if _, err := cache.GetOrLoad(ctx, c, "warm", func(context.Context) (string, error) { return "w", nil }); err != nil {
		t.Fatal(err)
	}
	<-missed

	// The later caller must have joined the fail-open run's flight
	// (Stats.Coalesced says so afterwards) for a round to tell: a few
	// rounds make sure one does.
	for round := range 10 {
		key := fmt.Sprintf("k%d", round)
		// A fail-open run: its read fails, its loader waits.
		p.Refuse()
		p.Reset()
		started, release := make(chan struct{}), make(chan struct{})
		old := make(chan string, 1)
		go func() {
			v, _ := cache.GetOrLoad(ctx, c, key, func(context.Context) (string, error) {
				close(started)
				<-release
				return "old", nil
			})
			old <- v
		}()
		redistest.Recv(t, ctx, started, "the fail-open run")
		for ev := ""; ev != "fail-open "+key; {
			ev = redistest.Recv(t, ctx, missed, "the fail-open run's events")
		}
		p.Resume()
		clk.Advance(cooldown + time.Second) // the server is used again
		if err := cache.Set(ctx, other, key, "written"); err != nil {
			t.Fatal(err)
		}
		if err := other.Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		// The next caller reads the key (free) and joins the flight of
		// the fail-open run.
		coalesced := c.Stats().Coalesced
		got := make(chan string, 1)
		go func() {
			v, err := cache.GetOrLoad(ctx, c, key, func(context.Context) (string, error) { return "new", nil })
			if err != nil {
				v = err.Error()
			}
			got <- v
		}()
		if ev := redistest.Recv(t, ctx, missed, "the later caller's miss"); ev != "miss "+key {
			t.Fatalf("event %q, want the later caller's miss", ev)
		}
		close(release)
		if v := redistest.Recv(t, ctx, old, "the fail-open run's caller"); v != "old" {
			t.Errorf("the fail-open run's own caller got %q, want its load", v)
		}
		if v := redistest.Recv(t, ctx, got, "the later caller"); v != "new" {
			t.Fatalf("round %d: GetOrLoad after the Delete = %q; want its own load, not the fail-open run begun before its read", round, v)
		}
		if c.Stats().Coalesced > coalesced {
			return // it joined the flight, and did not take its result
		}
	}
	t.Fatal("in 10 rounds the later caller never joined the fail-open run's flight")
}
