package cache_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/redis/go-redis/v9"
)

// The ACL tests run the cache as a user holding exactly what
// docs/permissions.md lists (redistest.CachePerms), and check that taking
// one permission away gives a clear error at once, not a timeout.

// aclCache returns a Cache in namespace ns on a client of its own logged in
// as u, as a separate process would have.
func aclCache(tb testing.TB, u *redistest.User, ns string, opts cache.Options) *cache.Cache {
	tb.Helper()
	opts.Namespace = ns
	return newCacheOn(tb, u.Client(tb), &opts)
}

// noKeys fails tb if anything is stored under ns (asked as the default
// user, who sees everything).
func noKeys(tb testing.TB, ctx context.Context, s *redistest.Server, ns string) {
	tb.Helper()
	rc := s.Client(tb)
	var keys []string
	if cc, ok := rc.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			ks, err := n.Keys(ctx, ns+":*").Result()
			mu.Lock()
			keys = append(keys, ks...)
			mu.Unlock()
			return err
		})
		if err != nil {
			tb.Fatal(err)
		}
	} else {
		var err error
		if keys, err = rc.Keys(ctx, ns+":*").Result(); err != nil {
			tb.Fatal(err)
		}
	}
	if len(keys) > 0 {
		tb.Errorf("keys left behind: %q", keys)
	}
}

// TestACL_cache_leastPrivilege runs the basic flows as a user holding
// exactly CachePerms: miss, hit, stale refresh of a large value (a
// conditional write by digest), Delete, and a waiter in another Cache
// woken by the announcement (PollInterval is a minute, so only the
// announcement can wake it within the test's time).
func TestACL_cache_leastPrivilege(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		u := s.User(t, redistest.CachePerms(s.Kind, ns)...)
		var now atomic.Int64
		now.Store(time.Now().UnixNano())
		opts := cache.Options{
			Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: time.Hour}, WaitTimeout: time.Minute, PollInterval: time.Minute,
			Now: func() time.Time { return time.Unix(0, now.Load()) },
		}
		a := aclCache(t, u, ns, opts)
		b := aclCache(t, u, ns, opts)

		var loads atomic.Int32
		large := strings.Repeat("x", 2000) // above DigestThreshold
		load := func(v string) loader.Func[string] {
			return func(context.Context) (string, error) { loads.Add(1); return v, nil }
		}
		if v, err := cache.GetOrLoad(ctx, a, "k", load(large+"1")); err != nil || v != large+"1" {
			t.Fatalf("miss: %.10q, %v", v, err)
		}
		if v, err := cache.GetOrLoad(ctx, b, "k", load("unused")); err != nil || v != large+"1" {
			t.Fatalf("hit: %.10q, %v", v, err)
		}

		// Stale: served at once, refreshed in the background by a
		// conditional write over the large old value.
		now.Add(int64(2 * time.Minute))
		if v, err := cache.GetOrLoad(ctx, a, "k", load(large+"2")); err != nil || v != large+"1" {
			t.Fatalf("stale hit: %.10q, %v", v, err)
		}
		redistest.WaitFor(t, ctx, "the refresh to end", func() bool { return !cache.RefreshRunning(a, "k") })
		if v, err := cache.Get[string](ctx, b, "k"); err != nil || v != large+"2" {
			t.Fatalf("after refresh: %.10q, %v", v, err)
		}

		if err := a.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		if _, err := cache.Get[string](ctx, b, "k"); !errors.Is(err, cache.ErrMiss) {
			t.Fatalf("after Delete: %v, want ErrMiss", err)
		}

		// A waiter in b, woken by a's announcement.
		started, release := make(chan struct{}), make(chan struct{})
		res := make(chan error, 2)
		go func() {
			_, err := cache.GetOrLoad(ctx, a, "w", heldLoader(started, release, "v"))
			res <- err
		}()
		redistest.Recv(t, ctx, started, "a's load to start")
		go func() {
			v, err := cache.GetOrLoad(ctx, b, "w", load("b must not load"))
			if err == nil && v != "v" {
				err = errors.New("waiter got " + v)
			}
			res <- err
		}()
		redistest.WaitFor(t, ctx, "b to wait", func() bool { return b.Stats().Waits > 0 })
		close(release)
		for range 2 {
			if err := redistest.Recv(t, ctx, res, "the loader and the waiter"); err != nil {
				t.Fatal(err)
			}
		}
		if n := loads.Load(); n != 2 {
			t.Errorf("loads = %d, want 2 (the miss and the refresh)", n)
		}
		for _, c := range []*cache.Cache{a, b} {
			st := c.Stats()
			if st.ServerErrors != 0 || st.AnnounceDenied != 0 {
				t.Errorf("stats %+v: want no server errors, no refused announcements", st)
			}
			caps, err := c.Capabilities(ctx)
			if err != nil || caps.AnnounceDenied != "" {
				t.Errorf("capabilities %v, %v", caps, err)
			}
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestACL_cache_scriptsDenied (issue 10, defect 17): Redis 7 with
// -@scripting. 3 Caches on separate clients × 10 callers: every caller
// gets ErrPermission, none waits for WaitTimeout, the loader never runs
// (nothing could be stored or released after it), no claim is left.
func TestACL_cache_scriptsDenied(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis7)
	ctx := testCtx(t)
	ns := namespace(t)
	u := s.User(t, append(redistest.CachePerms(s.Kind, ns), "-@scripting")...)
	opts := cache.Options{WaitTimeout: 5 * time.Minute, PollInterval: time.Second}
	var loads atomic.Int32
	load := func(context.Context) (string, error) { loads.Add(1); return "v", nil }

	errs := make(chan error, 30)
	gate := make(chan struct{})
	var caches []*cache.Cache
	for range 3 {
		c := aclCache(t, u, ns, opts)
		caches = append(caches, c)
		for range 10 {
			go func() {
				<-gate
				_, err := cache.GetOrLoad(ctx, c, "k", load)
				errs <- err
			}()
		}
	}
	close(gate)
	for i := range 30 {
		err := redistest.Recv(t, ctx, errs, "a caller's answer")
		switch {
		case errors.Is(err, cache.ErrWaitTimeout):
			t.Errorf("a caller waited for WaitTimeout: %v", err)
		case !errors.Is(err, cache.ErrPermission):
			t.Errorf("err = %v, want ErrPermission", err)
		case !strings.Contains(err.Error(), "evalsha") || !strings.Contains(err.Error(), "DELEX"):
			t.Errorf("err = %v: want it to name the refused command and the alternative", err)
		case i == 0:
			t.Log(err)
		}
	}
	if n := loads.Load(); n != 0 {
		t.Errorf("loads = %d, want 0", n)
	}
	noKeys(t, ctx, s, ns)
	caps, err := caches[0].Capabilities(ctx)
	if err != nil || caps.ScriptsDenied == "" {
		t.Errorf("capabilities %v, %v: want scripts reported denied", caps, err)
	}
}

// TestACL_cache_scriptsRevokedDuringLoad: scripting is taken away while a
// rebuild runs; its write is refused. The waiter in another Cache is told
// at once (ErrPermission with ErrRemoteLoad), not after WaitTimeout, and
// the rebuilder's next miss fails at once without claiming.
func TestACL_cache_scriptsRevokedDuringLoad(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis7)
	ctx := testCtx(t)
	ns := namespace(t)
	perms := redistest.CachePerms(s.Kind, ns)
	u := s.User(t, perms...)
	opts := cache.Options{WaitTimeout: 5 * time.Minute, PollInterval: time.Second}
	a := aclCache(t, u, ns, opts)
	b := aclCache(t, u, ns, opts)

	started, release := make(chan struct{}), make(chan struct{})
	res := make(chan error, 2)
	go func() {
		_, err := cache.GetOrLoad(ctx, a, "k", heldLoader(started, release, "v"))
		res <- err
	}()
	redistest.Recv(t, ctx, started, "a's load to start")
	waiter := make(chan error, 1)
	go func() {
		_, err := cache.GetOrLoad(ctx, b, "k", func(context.Context) (string, error) { return "b", nil })
		waiter <- err
	}()
	redistest.WaitFor(t, ctx, "b to wait", func() bool { return b.Stats().Waits > 0 })
	if err := u.Set(append(perms, "-@scripting")...); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := redistest.Recv(t, ctx, res, "a's answer"); err != nil {
		t.Errorf("a (loaded the value, could not store it): %v", err)
	}
	err := redistest.Recv(t, ctx, waiter, "b's answer")
	t.Log(err)
	if !errors.Is(err, cache.ErrPermission) || !errors.Is(err, cache.ErrRemoteLoad) {
		t.Errorf("waiter: %v, want ErrPermission and ErrRemoteLoad", err)
	}
	if _, err := cache.GetOrLoad(ctx, a, "other", func(context.Context) (string, error) { return "x", nil }); !errors.Is(err, cache.ErrPermission) {
		t.Errorf("a's next miss: %v, want ErrPermission", err)
	}
}

// TestACL_cache_permissionRemoved: a user lacking one command that the
// docs/permissions.md lists for the server gets ErrPermission naming it
// at once, and nothing is left behind.
func TestACL_cache_permissionRemoved(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind redistest.Kind
		drop string
		want string
	}{
		{name: "redis8 without delex", kind: redistest.Redis8, drop: "+delex", want: "evalsha"},
		{name: "redis7 without eval", kind: redistest.Redis7, drop: "+eval", want: "eval"},
		{name: "valkey without get", kind: redistest.Valkey, drop: "+get", want: "get"},
		{name: "redis8 without set", kind: redistest.Redis8, drop: "+set", want: "set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Shared(t, tc.kind)
			ctx := testCtx(t)
			ns := namespace(t)
			var perms []string
			for _, p := range redistest.CachePerms(s.Kind, ns) {
				if p != tc.drop {
					perms = append(perms, p)
				}
			}
			u := s.User(t, perms...)
			c := aclCache(t, u, ns, cache.Options{WaitTimeout: 5 * time.Minute})
			var loads atomic.Int32
			_, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) { loads.Add(1); return "v", nil })
			t.Log(err)
			if !errors.Is(err, cache.ErrPermission) || !strings.Contains(strings.ToLower(err.Error()), tc.want) {
				t.Errorf("err = %v, want ErrPermission naming %q", err, tc.want)
			}
			if n := loads.Load(); n != 0 {
				t.Errorf("loads = %d, want 0", n)
			}
			noKeys(t, ctx, s, ns)
		})
	}
}

// logSink is a slog.Handler that keeps the messages and signals each one.
type logSink struct {
	mu   sync.Mutex
	msgs []string
	ch   chan string
}

func newLogSink() *logSink { return &logSink{ch: make(chan string, 100)} }

func (l *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSink) Handle(_ context.Context, r slog.Record) error {
	msg := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool { msg += " " + a.Key + "=" + a.Value.String(); return true })
	l.mu.Lock()
	l.msgs = append(l.msgs, msg)
	l.mu.Unlock()
	select {
	case l.ch <- msg:
	default:
	}
	return nil
}
func (l *logSink) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logSink) WithGroup(string) slog.Handler      { return l }

// waitLog waits for a message containing every one of parts.
func (l *logSink) waitLog(tb testing.TB, ctx context.Context, parts ...string) {
	tb.Helper()
	for {
		msg := redistest.Recv(tb, ctx, l.ch, "a log message with "+strings.Join(parts, ", "))
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(msg, p)
		}
		if ok {
			return
		}
	}
}

// TestACL_cache_channelDenied (issue 10, defect 18): a user without the
// announcement channels (Redis 7's default for new users), or without the
// command that publishes on them (SPUBLISH per key; PUBLISH with
// Options.Broadcast). The waiter still gets the value (by polling), and the
// refusal is told: a warning naming the channel, Stats.AnnounceDenied, and
// Capabilities.AnnounceDenied.
func TestACL_cache_channelDenied(t *testing.T) {
	for _, tc := range []struct {
		name      string
		broadcast bool
		drop      string
	}{
		{name: "no channel", drop: "&"},
		{name: "no publish", drop: "+spublish"},
		{name: "broadcast, no channel", broadcast: true, drop: "&"},
		{name: "broadcast, no publish", broadcast: true, drop: "+publish"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Shared(t, redistest.Redis7)
			ctx := testCtx(t)
			ns := namespace(t)
			granted := redistest.CachePerms(s.Kind, ns)
			if tc.broadcast {
				granted = append(granted, redistest.CacheBroadcastPerms()...)
			}
			var perms []string
			for _, p := range granted {
				if !strings.HasPrefix(p, tc.drop) {
					perms = append(perms, p)
				}
			}
			u := s.User(t, perms...)
			logs := newLogSink()
			opts := cache.Options{WaitTimeout: 5 * time.Minute, PollInterval: 20 * time.Millisecond, Logger: slog.New(logs), Broadcast: tc.broadcast}
			a := aclCache(t, u, ns, opts)
			b := aclCache(t, u, ns, opts)
			channel := ns + ":{K}:ann"
			if tc.broadcast {
				channel = ns + ":announce"
			}
			if tc.drop == "&" && tc.broadcast {
				// Subscribed from New on.
				logs.waitLog(t, ctx, "WARN", channel)
			}

			started, release := make(chan struct{}), make(chan struct{})
			res := make(chan error, 2)
			go func() {
				_, err := cache.GetOrLoad(ctx, a, "k", heldLoader(started, release, "v"))
				res <- err
			}()
			redistest.Recv(t, ctx, started, "a's load to start")
			go func() {
				v, err := cache.GetOrLoad(ctx, b, "k", func(context.Context) (string, error) { return "b", nil })
				if err == nil && v != "v" {
					err = errors.New("waiter got " + v)
				}
				res <- err
			}()
			redistest.WaitFor(t, ctx, "b to wait", func() bool { return b.Stats().Waits > 0 })
			close(release)
			for range 2 {
				if err := redistest.Recv(t, ctx, res, "the loader and the waiter"); err != nil {
					t.Fatal(err)
				}
			}
			if tc.drop != "&" || !tc.broadcast {
				logs.waitLog(t, ctx, "WARN", channel)
			}
			n := a.Stats().AnnounceDenied
			if n == 0 {
				t.Errorf("a: Stats.AnnounceDenied = 0")
			}
			if tc.drop != "&" {
				// Set and Delete announce too.
				if err := cache.Set(ctx, a, "k2", "v"); err != nil {
					t.Fatal(err)
				}
				if err := a.Delete(ctx, "k2"); err != nil {
					t.Fatal(err)
				}
				if m := a.Stats().AnnounceDenied; m != n+2 {
					t.Errorf("Stats.AnnounceDenied went from %d to %d after a Set and a Delete, want +2", n, m)
				}
			}
			caps, err := a.Capabilities(ctx)
			if err != nil || caps.AnnounceDenied == "" || !strings.Contains(caps.String(), "announcements=denied") {
				t.Errorf("a: capabilities %v, %v: want announcements denied", caps, err)
			}
		})
	}
}

// TestACL_cache_deleteDenied: Delete, Set and Get refused by the ACL
// return ErrPermission too.
func TestACL_cache_deleteDenied(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	ns := namespace(t)
	var perms []string
	for _, p := range redistest.CachePerms(s.Kind, ns) {
		if p != "+del" && p != "+set" && p != "+get" {
			perms = append(perms, p)
		}
	}
	c := aclCache(t, s.User(t, perms...), ns, cache.Options{})
	if err := c.Delete(ctx, "k"); !errors.Is(err, cache.ErrPermission) {
		t.Errorf("Delete: %v, want ErrPermission", err)
	}
	if err := cache.Set(ctx, c, "k", "v"); !errors.Is(err, cache.ErrPermission) {
		t.Errorf("Set: %v, want ErrPermission", err)
	}
	if _, err := cache.Get[string](ctx, c, "k"); !errors.Is(err, cache.ErrPermission) {
		t.Errorf("Get: %v, want ErrPermission", err)
	}
}

// TestACL_cache_near: the near cache needs NearPerms beyond CachePerms.
// Without them it stays off, says why in a warning, and the cache works
// from the server; with them it answers hits.
func TestACL_cache_near(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		for _, granted := range []bool{false, true} {
			ns := namespace(t)
			perms := redistest.CachePerms(s.Kind, ns)
			if granted {
				perms = append(perms, redistest.NearPerms()...)
			}
			logs := newLogSink()
			c := aclCache(t, s.User(t, perms...), ns, cache.Options{Near: &cache.Near{MaxEntries: 100}, Logger: slog.New(logs)})
			if granted {
				redistest.WaitFor(t, ctx, "near cache active", c.NearActive)
			} else {
				logs.waitLog(t, ctx, "near cache off", "NOPERM")
			}
			var calls atomic.Int64
			get := func() bool {
				if v, err := cache.GetOrLoad(ctx, c, "k", constLoader("v", &calls)); err != nil || v != "v" {
					t.Fatalf("granted %v: GetOrLoad = %q, %v", granted, v, err)
				}
				return c.Stats().NearHits > 0
			}
			if granted {
				// The invalidations of the load's own writes may arrive
				// after the next read filled the near cache, and drop it.
				redistest.WaitFor(t, ctx, "a near hit", get)
			} else {
				for range 5 {
					get()
				}
			}
			if st := c.Stats(); c.NearActive() != granted || (st.NearHits > 0) != granted || calls.Load() != 1 {
				t.Fatalf("granted %v: NearActive %v, NearHits %d, loads %d", granted, c.NearActive(), st.NearHits, calls.Load())
			}
		}
	}, trackingKinds...)
}

// TestACL_cache_failureMarker: the marker a failed rebuild leaves beside
// the key (NS:{K}:fail, within CachePerms' ~NS:*), without which a waiter
// that missed the failure's announcement loads itself.
//
// "marker refused": a user whose key rules name the value keys, the
// rebuild locks and the probe keys, not the marker: the rebuild's callers
// get their error as ever, the refused write is counted in ServerErrors
// (its event carries the NOPERM), and a waiter whose subscription came
// after the failure loads, as before markers.
//
// "no channel": a user without the announcement channels, whose waiters
// poll: the announcement of a failure reaches nobody, and the waiter,
// finding the key free on its next poll, takes the failure from the
// marker: ErrRemoteLoad, no load of its own. (Before markers: it loaded.)
func TestACL_cache_failureMarker(t *testing.T) {
	t.Run("marker refused", func(t *testing.T) {
		redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
			ctx := testCtx(t)
			ns := namespace(t)
			var perms []string
			for _, p := range redistest.CachePerms(s.Kind, ns) {
				if p == "~"+ns+":*" {
					p = "~" + ns + ":{*}"
					perms = append(perms, "~"+ns+":{*}:lock", "~"+ns+":{*}:probe:*")
				}
				perms = append(perms, p)
			}
			u := s.User(t, perms...)
			var refused atomic.Int32
			w := failBeforeSubscribe(t, ctx, s, window{rebuild: failingGetOrLoad, wait: waitGetOrLoad,
				ns: ns, client: u.Client,
				observe: func(e cache.Event) {
					if e.Kind == cache.EventServerError && e.Err != nil && strings.Contains(e.Err.Error(), "NOPERM") {
						refused.Add(1)
					}
				}})
			if w.calls != 1 {
				t.Errorf("cache b: %q, %v, %d loads; want its own load, as before markers", w.v, w.err, w.calls)
			}
			if refused.Load() == 0 {
				t.Errorf("cache a: no server error with NOPERM for the refused marker")
			}
		}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
	})
	t.Run("no channel", func(t *testing.T) {
		redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
			ctx := testCtx(t)
			ns := namespace(t)
			var perms []string
			for _, p := range redistest.CachePerms(s.Kind, ns) {
				if !strings.HasPrefix(p, "&") {
					perms = append(perms, p)
				}
			}
			u := s.User(t, perms...)
			opts := cache.Options{WaitTimeout: time.Minute, PollInterval: 20 * time.Millisecond, Logger: slog.New(newLogSink())}
			a := aclCache(t, u, ns, opts)
			b := aclCache(t, u, ns, opts)
			holder, open := failingLoad(t, ctx, a, "cache a to claim the key and load")
			var calls atomic.Int32
			waiter := goGetOrLoad(ctx, b, "k", neverLoad[string](&calls))
			redistest.WaitFor(t, ctx, "cache b to wait", func() bool { return b.Stats().Waits > 0 })
			open()
			if r := redistest.Recv(t, ctx, holder, "cache a"); r.err == nil || !strings.Contains(r.err.Error(), "upstream answered 503") {
				t.Errorf("cache a: %q, %v; want its loader's error", r.v, r.err)
			}
			r := redistest.Recv(t, ctx, waiter, "cache b")
			if !errors.Is(r.err, cache.ErrRemoteLoad) || !strings.Contains(r.err.Error(), "upstream answered 503") || calls.Load() != 0 {
				t.Errorf("cache b: %q, %v, %d loads of its own; want ErrRemoteLoad with a's error, and no load", r.v, r.err, calls.Load())
			}
		}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
	})
}

// With CachePerms and CacheBackendPerms a capped load waits for the
// permit another process holds and is woken by its release (the poll is a
// minute); with CachePerms alone a capped load is refused with
// ErrPermission, its loader never run.
func TestACL_cache_backends(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		opts := cache.Options{Backends: map[string]int{"db": 1}, Backend: "db", WaitTimeout: time.Minute, PollInterval: time.Minute}
		u := s.User(t, append(redistest.CachePerms(s.Kind, ns), redistest.CacheBackendPerms()...)...)
		a, b := aclCache(t, u, ns, opts), aclCache(t, u, ns, opts)
		started, release := make(chan struct{}), make(chan struct{})
		held := goGetOrLoad(ctx, a, "slow", heldLoader(started, release, "slow"))
		redistest.Recv(t, ctx, started, "the load holding the permit")
		waiter := goGetOrLoad(ctx, b, "k", func(context.Context) (string, error) { return "v", nil })
		redistest.WaitFor(t, ctx, "the load to wait for a permit", func() bool { return b.Stats().BackendWaits == 1 })
		close(release)
		if r := redistest.Recv(t, ctx, held, "the slow load"); r.err != nil {
			t.Fatal(r.err)
		}
		if r := redistest.Recv(t, ctx, waiter, "the waiting load"); r.err != nil || r.v != "v" {
			t.Fatalf("waiting load = %q, %v", r.v, r.err)
		}

		nu := s.User(t, redistest.CachePerms(s.Kind, ns)...)
		c := aclCache(t, nu, ns, opts)
		var calls atomic.Int32
		if _, err := cache.GetOrLoad(ctx, c, "k2", neverLoad[string](&calls)); !errors.Is(err, cache.ErrPermission) {
			t.Errorf("capped load without CacheBackendPerms: %v, want ErrPermission", err)
		}
		if n := calls.Load(); n != 0 {
			t.Errorf("the loader ran %d times", n)
		}
	})
}

// TestACL_cache_oneStepWrite: a miss writes its value and publishes its
// announcement in one script where the user may run scripts. A user
// refused scripts (Redis 8.6, Valkey 9 and the Cluster need none with
// CachePerms) writes and then announces, in two steps: the waiter of
// another Cache still hears of the value (its poll is a minute away). A
// user allowed scripts but not SPUBLISH has its value written by the
// script, whose refused publish is told as any refused announcement
// (Stats.AnnounceDenied, a warning naming the channel) and not sent again
// on its own; the waiter gets the value by its poll.
func TestACL_cache_oneStepWrite(t *testing.T) {
	for _, tc := range []struct {
		name      string
		scripts   bool
		publish   bool
		scripted  int // announcements the write's script published
		published int // (S)PUBLISHes the writer's client sent, the script's included
	}{
		{name: "no scripts", publish: true, published: 1},
		{name: "scripts", scripts: true, publish: true, scripted: 1, published: 1},
		{name: "scripts, no publish", scripts: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
				ctx := testCtx(t)
				ns := namespace(t)
				var perms []string
				for _, p := range redistest.CachePerms(s.Kind, ns) {
					if p != "+evalsha" && p != "+eval" && (tc.publish || p != "+spublish") {
						perms = append(perms, p)
					}
				}
				if tc.scripts {
					perms = append(perms, "+evalsha", "+eval")
				}
				u := s.User(t, perms...)
				logs := newLogSink()
				poll := time.Minute
				if !tc.publish {
					poll = 20 * time.Millisecond
				}
				opts := &cache.Options{Namespace: ns, WaitTimeout: 5 * time.Minute, PollInterval: poll, Logger: slog.New(logs)}
				rcA := u.Client(t)
				pubs := countReceivers(rcA)
				a := newCacheOn(t, rcA, opts)
				b := newCacheOn(t, u.Client(t), opts)

				started, release := make(chan struct{}), make(chan struct{})
				rebuild := goGetOrLoad(ctx, a, "k", heldLoader(started, release, "v"))
				redistest.Recv(t, ctx, started, "a's load to start")
				var calls atomic.Int32
				waiter := goGetOrLoad(ctx, b, "k", neverLoad[string](&calls))
				redistest.WaitFor(t, ctx, "b to wait", func() bool { return b.Stats().Waits > 0 })
				pubs.take()
				close(release)
				for _, r := range []<-chan result[string]{rebuild, waiter} {
					if got := redistest.Recv(t, ctx, r, "the loader and the waiter"); got.err != nil || got.v != "v" {
						t.Fatalf("GetOrLoad = %q, %v; want v", got.v, got.err)
					}
				}
				scripted := pubs.inScripts()
				published, _ := pubs.take()
				if scripted != tc.scripted || published != tc.published || calls.Load() != 0 {
					t.Errorf("%d announcements published, %d by the write's script, %d loads by the waiter; want %d, %d, none",
						published, scripted, calls.Load(), tc.published, tc.scripted)
				}
				if st := a.Stats(); st.ServerErrors != 0 || (st.AnnounceDenied == 1) != !tc.publish || st.AnnounceDenied > 1 {
					t.Errorf("a: stats %+v; want no server errors, and AnnounceDenied 1 where SPUBLISH is refused, else 0", st)
				}
				if !tc.publish {
					logs.waitLog(t, ctx, "WARN", ns+":{K}:ann", "SPUBLISH")
					if caps, err := a.Capabilities(ctx); err != nil || caps.AnnounceDenied == "" {
						t.Errorf("a: capabilities %v, %v: want announcements denied", caps, err)
					}
				}
			}, redistest.Redis8, redistest.Valkey, redistest.Cluster)
		})
	}
}
