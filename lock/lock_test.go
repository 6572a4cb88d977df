package lock_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

func newClient(tb testing.TB, s *redistest.Server, opts *lock.Options) (*lock.Client, redis.UniversalClient) {
	tb.Helper()
	rc := s.Client(tb)
	c, err := lock.New(rc, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return c, rc
}

// newForced is newClient with the strategies fixed to caps instead of
// probed.
func newForced(tb testing.TB, s *redistest.Server, caps lock.Capabilities) (*lock.Client, redis.UniversalClient) {
	tb.Helper()
	rc := s.Client(tb)
	c, err := lock.New(&redisx.Forced{Client: rc, Caps: redisx.Mirror[redisx.Capabilities](caps)}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return c, rc
}

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

func TestClient_Capabilities_probe(t *testing.T) {
	want := map[redistest.Kind]lock.Capabilities{
		redistest.Redis7:    {Release: lock.ReleaseLua, Extend: lock.ExtendLua, Digest: lock.DigestLua},
		redistest.Redis8:    {Release: lock.ReleaseDelex, Extend: lock.ExtendSetIfEq, Digest: lock.DigestNative},
		redistest.Valkey:    {Release: lock.ReleaseDelIfEq, Extend: lock.ExtendSetIfEq, Digest: lock.DigestLua, DelIfEq: true},
		redistest.Cluster:   {Release: lock.ReleaseDelex, Extend: lock.ExtendSetIfEq, Digest: lock.DigestNative},
		redistest.Miniredis: {Release: lock.ReleaseDelex, Extend: lock.ExtendLua, Digest: lock.DigestLua},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		c, _ := newClient(t, s, nil)
		got, err := c.Capabilities(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		w := want[s.Kind]
		if got.Release != w.Release || got.Extend != w.Extend || got.Digest != w.Digest || got.DelIfEq != w.DelIfEq {
			t.Errorf("capabilities = %v (DelIfEq %t), want %v (DelIfEq %t)", got, got.DelIfEq, w, w.DelIfEq)
		}
		if s.Kind != redistest.Miniredis && got.Server == "" {
			t.Errorf("server name missing from %v", got)
		}
		t.Logf("%v", got)
	})
}

// strategies lists every combination a server can be forced to use.
func strategies(probed lock.Capabilities) []lock.Capabilities {
	releases := []lock.ReleaseStrategy{lock.ReleaseLua}
	if probed.DelIfEq {
		releases = append(releases, lock.ReleaseDelIfEq)
	}
	if probed.Release == lock.ReleaseDelex {
		releases = append(releases, lock.ReleaseDelex)
	}
	extends := []lock.ExtendStrategy{lock.ExtendLua}
	if probed.Extend == lock.ExtendSetIfEq {
		extends = append(extends, lock.ExtendSetIfEq)
	}
	digests := []lock.DigestStrategy{lock.DigestLua}
	if probed.Digest == lock.DigestNative {
		digests = append(digests, lock.DigestNative)
	}
	var out []lock.Capabilities
	for _, r := range releases {
		for _, e := range extends {
			for _, d := range digests {
				out = append(out, lock.Capabilities{Release: r, Extend: e, Digest: d, DelIfEq: probed.DelIfEq})
			}
		}
	}
	return out
}

// TestLock_lifecycle runs obtain, refresh, TTL and release, and the
// not-held paths, with every strategy each server offers, for small values
// and for values above the digest threshold.
func TestLock_lifecycle(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		probe, _ := newClient(t, s, nil)
		probed, err := probe.Capabilities(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, caps := range strategies(probed) {
			for _, size := range []int{0, 2000} {
				name := strings.NewReplacer(" ", "", "(", "", ")", "").Replace(
					caps.Release.String() + "/" + caps.Extend.String() + "/" + caps.Digest.String())
				if size > 0 {
					name += "/large"
				}
				t.Run(name, func(t *testing.T) {
					testLifecycle(t, s, caps, strings.Repeat("m", size))
				})
			}
		}
	})
}

func testLifecycle(t *testing.T, s *redistest.Server, caps lock.Capabilities, meta string) {
	ctx := testCtx(t)
	c, rc := newForced(t, s, caps)
	other, _ := newClient(t, s, nil)
	key := redistest.Key(t, "lock")

	l, err := c.Obtain(ctx, key, time.Minute, lock.WithMetadata(meta))
	if err != nil {
		t.Fatalf("Obtain: %v", err)
	}
	if len(l.Token()) != 32 || l.Key() != key || l.Metadata() != meta {
		t.Fatalf("lock = token %q key %q meta %d bytes", l.Token(), l.Key(), len(l.Metadata()))
	}
	if _, err := other.Obtain(ctx, key, time.Minute); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("second Obtain = %v, want ErrNotObtained", err)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl <= 50*time.Second || ttl > time.Minute {
		t.Fatalf("TTL = %v, %v; want about 1m", ttl, err)
	}
	if err := l.Refresh(ctx, time.Hour); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if ttl, err := l.TTL(ctx); err != nil || ttl <= 59*time.Minute {
		t.Fatalf("TTL after Refresh = %v, %v; want about 1h", ttl, err)
	}
	info, err := other.Inspect(ctx, key)
	if err != nil || info.Token != l.Token() || info.Metadata != meta || info.TTL <= 59*time.Minute {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Release = %v, want ErrNotHeld", err)
	}

	// The lock expires (simulated by deleting it) and another owner takes
	// it: the first owner's release, refresh and TTL must fail and leave the
	// new owner's lock exactly as it was.
	l, err = c.Obtain(ctx, key, time.Minute, lock.WithMetadata(meta))
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	l2, err := other.Obtain(ctx, key, 30*time.Second, lock.WithMetadata(meta))
	if err != nil {
		t.Fatalf("Obtain after expiry: %v", err)
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Release of a taken lock = %v, want ErrNotHeld", err)
	}
	if err := l.Refresh(ctx, time.Hour); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Refresh of a taken lock = %v, want ErrNotHeld", err)
	}
	if _, err := l.TTL(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("TTL of a taken lock = %v, want ErrNotHeld", err)
	}
	ttl, err := l2.TTL(ctx)
	if err != nil || ttl > 30*time.Second || ttl < 20*time.Second {
		t.Errorf("new owner's TTL = %v, %v; want its own 30s untouched", ttl, err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Errorf("new owner's Release: %v", err)
	}
	if _, err := other.Inspect(ctx, key); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Inspect of a free key = %v, want ErrNotHeld", err)
	}
}

// TestLock_runtimeDowngrade forces native commands on servers that refuse
// them: each operation must fall back and succeed, and the client must
// then report the fallback.
func TestLock_runtimeDowngrade(t *testing.T) {
	tests := []struct {
		name string
		kind redistest.Kind
		meta string
		want lock.Capabilities
	}{
		{"redis7 small", redistest.Redis7, "", lock.Capabilities{Release: lock.ReleaseLua, Extend: lock.ExtendLua, Digest: lock.DigestNative}},
		{"redis7 large", redistest.Redis7, strings.Repeat("x", 1000), lock.Capabilities{Release: lock.ReleaseDelex, Extend: lock.ExtendSetIfEq, Digest: lock.DigestLua}},
		{"valkey small", redistest.Valkey, "", lock.Capabilities{Release: lock.ReleaseDelIfEq, Extend: lock.ExtendSetIfEq, Digest: lock.DigestNative, DelIfEq: true}},
		{"valkey large", redistest.Valkey, strings.Repeat("x", 1000), lock.Capabilities{Release: lock.ReleaseDelex, Extend: lock.ExtendSetIfEq, Digest: lock.DigestLua}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := redistest.Shared(t, tt.kind)
			ctx := testCtx(t)
			forced := lock.Capabilities{Release: lock.ReleaseDelex, Extend: lock.ExtendSetIfEq, Digest: lock.DigestNative, DelIfEq: tt.want.DelIfEq}
			c, _ := newForced(t, s, forced)
			key := redistest.Key(t, "lock")
			l, err := c.Obtain(ctx, key, time.Minute, lock.WithMetadata(tt.meta))
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Refresh(ctx, time.Hour); err != nil {
				t.Fatalf("Refresh: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
				t.Fatalf("second Release = %v, want ErrNotHeld", err)
			}
			got, _ := c.Capabilities(ctx)
			if got.Release != tt.want.Release || got.Extend != tt.want.Extend || got.Digest != tt.want.Digest {
				t.Errorf("after fallback: %v, want %v", got, tt.want)
			}
		})
	}
}

func TestClient_badInput(t *testing.T) {
	// Nothing listens on this address: any server call would fail with a
	// connection error rather than ErrInvalid.
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rc.Close()
	c, err := lock.New(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	nop := func(context.Context) error { return nil }
	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"nil client", func() error { _, err := lock.New(nil, nil); return err }, "rc is nil: New needs a Redis client"},
		{"typed nil client", func() error { var rdb *redis.Client; _, err := lock.New(rdb, nil); return err }, "rc is nil: New needs a Redis client"},
		{"negative threshold", func() error { _, err := lock.New(rc, &lock.Options{DigestThreshold: -1}); return err }, "Options.DigestThreshold -1 is negative"},
		{"negative MaxMetadata", func() error { _, err := lock.New(rc, &lock.Options{MaxMetadata: -2}); return err }, "Options.MaxMetadata -2 is negative"},
		{"empty key", func() error { _, err := c.Obtain(ctx, "", time.Second); return err }, "key is empty"},
		{"zero ttl", func() error { _, err := c.Obtain(ctx, "k", 0); return err }, `ttl 0s for key "k" is below 1ms`},
		{"sub-ms ttl", func() error { _, err := c.Obtain(ctx, "k", time.Microsecond); return err }, `ttl 1µs for key "k" is below 1ms`},
		{"negative ttl", func() error { _, err := c.Obtain(ctx, "k", -time.Second); return err }, `ttl -1s for key "k" is below 1ms`},
		{"huge metadata", func() error {
			_, err := c.Obtain(ctx, "k", time.Second, lock.WithMetadata(strings.Repeat("m", 64<<10+1)))
			return err
		}, `WithMetadata of 65537 bytes for key "k" is longer than Options.MaxMetadata (65536 bytes)`},
		{"negative MaxWait", func() error { _, err := c.Obtain(ctx, "k", time.Second, lock.WithMaxWait(-1)); return err },
			`WithMaxWait -1ns for key "k" is negative`},
		{"fencing without slot", func() error {
			_, err := c.Obtain(ctx, "a}b", time.Second, lock.WithFencing())
			return err
		}, `WithFencing on key "a}b": key has '}' but no hash tag, so no companion key can share its cluster slot`},
		{"Do nil fn", func() error { return c.Do(ctx, "k", time.Second, nil) }, `Do fn for key "k" is nil`},
		{"Do empty key", func() error { return c.Do(ctx, "", time.Second, nop) }, "key is empty"},
		{"Do refresh >= ttl", func() error { return c.Do(ctx, "k", time.Second, nop, lock.WithRefreshEvery(time.Second)) },
			`WithRefreshEvery 1s for key "k" must be at least 1ms and below ttl 1s`},
		{"Do refresh below 1ms", func() error { return c.Do(ctx, "k", time.Second, nop, lock.WithRefreshEvery(time.Microsecond)) },
			`WithRefreshEvery 1µs for key "k" must be at least 1ms and below ttl 1s`},
		{"Do default refresh below 1ms", func() error { return c.Do(ctx, "k", 2*time.Millisecond, nop) },
			`ttl 2ms for key "k" is below 3ms, so its default refresh interval, ttl/3, is below 1ms: set WithRefreshEvery`},
		{"Do zero ttl", func() error { return c.Do(ctx, "k", 0, nop) }, `ttl 0s for key "k" is below 1ms`},
		{"RunOnce nil fn", func() error { _, err := c.RunOnce(ctx, "k", time.Second, nil); return err }, `RunOnce fn for key "k" is nil`},
		{"RunOnce MinHold > maxHold", func() error {
			_, err := c.RunOnce(ctx, "k", time.Second, nop, lock.WithMinHold(time.Minute))
			return err
		}, `WithMinHold 1m0s for key "k" must be between 0 and maxHold 1s`},
		{"RunOnce zero maxHold", func() error { _, err := c.RunOnce(ctx, "k", 0, nop); return err }, `maxHold 0s for key "k" is below 1ms`},
		{"RunOnce empty key", func() error { _, err := c.RunOnce(ctx, "", time.Second, nop); return err }, "key is empty"},
		{"Inspect empty key", func() error { _, err := c.Inspect(ctx, ""); return err }, "key is empty"},
		{"ObtainMany empty key", func() error { _, err := c.ObtainMany(ctx, []string{"a", ""}, time.Second); return err }, "ObtainMany keys[1] is empty"},
		{"ObtainMany zero ttl", func() error { _, err := c.ObtainMany(ctx, []string{"a"}, 0); return err }, "ObtainMany ttl 0s is below 1ms"},
		{"ReplaceMany nil lock", func() error { return c.ReplaceMany(ctx, []lock.Replacement{{TTL: time.Second}})[0] }, "ReplaceMany rs[0].Lock is nil"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if want := "lock: " + tt.want; !errors.Is(err, lock.ErrInvalid) || err == nil || err.Error() != want {
				t.Errorf("error = %v, want %q matching ErrInvalid", err, want)
			}
		})
	}
}

// obtainFenced obtains key with fencing, releases it and returns its fence.
func obtainFenced(tb testing.TB, ctx context.Context, c *lock.Client, key string) int64 {
	tb.Helper()
	l, err := c.Obtain(ctx, key, time.Minute, lock.WithFencing())
	if err != nil {
		tb.Fatalf("Obtain %q: %v", key, err)
	}
	if err := l.Release(ctx); err != nil {
		tb.Fatalf("Release %q: %v", key, err)
	}
	return l.Fence()
}

func fenceKey(tb testing.TB, key string) string {
	tb.Helper()
	fk, ok := lock.FenceKey(key)
	if !ok {
		tb.Fatalf("FenceKey(%q) not ok", key)
	}
	return fk
}

// Issue 10, defect 14: a server restarted without persistence comes back
// without the fence counter. The numbers drawn after it must still exceed
// every number drawn before, or a fenced store turns every new holder away.
// Redis 7, Redis 8 and Valkey are killed and started again, empty. The test
// bed cannot restart a cluster, and miniredis keeps its data across a
// restart, so there the counter is deleted, which is what such a restart
// does to it.
func TestLock_Fence_afterRestartWithoutPersistence(t *testing.T) {
	for _, kind := range redistest.Kinds() {
		t.Run(string(kind), func(t *testing.T) {
			ctx := testCtx(t)
			var (
				s    *redistest.Server
				lose func(rc redis.UniversalClient, key string) error
			)
			switch kind {
			case redistest.Redis7, redistest.Redis8, redistest.Valkey:
				s = redistest.Start(t, kind)
				lose = func(redis.UniversalClient, string) error { s.Kill(); return s.Restart() }
			default:
				s = redistest.Shared(t, kind)
				lose = func(rc redis.UniversalClient, key string) error {
					return rc.Del(ctx, fenceKey(t, key)).Err()
				}
			}
			c, rc := newClient(t, s, nil)
			key := "{" + redistest.Key(t, "fenced") + "}"
			var last int64
			for i := range 3 {
				f := obtainFenced(t, ctx, c, key)
				if f <= last {
					t.Fatalf("acquisition %d: fence %d after %d", i+1, f, last)
				}
				last = f
			}
			if err := lose(rc, key); err != nil {
				t.Fatal(err)
			}
			if n, err := rc.Exists(ctx, fenceKey(t, key)).Result(); err != nil || n != 0 {
				t.Fatalf("the counter survived (EXISTS = %d, %v): the test tests nothing", n, err)
			}
			if f := obtainFenced(t, ctx, c, key); f <= last {
				t.Errorf("fence %d after the counter was lost, %d before: numbers went back", f, last)
			}
		})
	}
}

// A replica promoted after missing the last increments holds an older
// counter. Its numbers must still exceed the ones the old master handed
// out, as long as its clock is not behind the old master's (here: the same
// server, so the same clock). The test sets the counter back to the value a
// replica that missed the last two acquisitions would hold.
func TestLock_Fence_laggingCounter(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, rc := newClient(t, s, nil)
		key := "{" + redistest.Key(t, "fenced") + "}"
		fk := fenceKey(t, key)
		obtainFenced(t, ctx, c, key)
		behind, err := rc.Get(ctx, fk).Result()
		if err != nil {
			t.Fatal(err)
		}
		obtainFenced(t, ctx, c, key)
		last := obtainFenced(t, ctx, c, key)
		if err := rc.Set(ctx, fk, behind, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if f := obtainFenced(t, ctx, c, key); f <= last {
			t.Errorf("fence %d from a counter two acquisitions behind, %d before: numbers went back", f, last)
		}
	})
}

// A counter ahead of the server's clock (the clock was set back, or the
// counter came from elsewhere) keeps counting up by one: the clock only
// ever raises the counter.
func TestLock_Fence_counterAheadOfClock(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, rc := newClient(t, s, nil)
		key := "{" + redistest.Key(t, "fenced") + "}"
		ahead := time.Now().Add(24*time.Hour).UnixMicro() + 12345
		if err := rc.Set(ctx, fenceKey(t, key), ahead, 0).Err(); err != nil {
			t.Fatal(err)
		}
		for i := range int64(2) {
			if f := obtainFenced(t, ctx, c, key); f != ahead+1+i {
				t.Errorf("fence %d from a counter at %d, want %d", f, ahead+i, ahead+1+i)
			}
			if got, err := rc.Get(ctx, fenceKey(t, key)).Result(); err != nil || got != strconv.FormatInt(ahead+1+i, 10) {
				t.Errorf("counter %q, %v; want %d", got, err, ahead+1+i)
			}
		}
		// The largest number a counter can reach exactly, then no further.
		last := int64(1<<53 - 1)
		if err := rc.Set(ctx, fenceKey(t, key), last-1, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if f := obtainFenced(t, ctx, c, key); f != last {
			t.Errorf("fence %d from a counter at 2^53-2, want %d", f, last)
		}
	})
}

// A counter key that holds something other than an integer fails the
// obtain with an error, and leaves no lock behind: before, the script took
// the lock and then failed on INCR, and the lock stayed for its full TTL
// with nobody holding it.
func TestLock_Fence_foreignCounter(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, rc := newClient(t, s, nil)
		key := "{" + redistest.Key(t, "fenced") + "}"
		for _, v := range []string{"not a number", "1e3", "9007199254740992", "99999999999999999999"} {
			if err := rc.Set(ctx, fenceKey(t, key), v, 0).Err(); err != nil {
				t.Fatal(err)
			}
			l, err := c.Obtain(ctx, key, time.Minute, lock.WithFencing())
			if err == nil || errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("counter %q: Obtain = %v, %v; want an error other than ErrNotObtained", v, l, err)
			}
			if _, err := c.Inspect(ctx, key); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("counter %q: after the failed Obtain, Inspect = %v; want ErrNotHeld (no lock left behind)", v, err)
			}
			if got, err := rc.Get(ctx, fenceKey(t, key)).Result(); err != nil || got != v {
				t.Errorf("counter %q: now %q, %v; want it left alone", v, got, err)
			}
			_ = rc.Del(ctx, key).Err()
		}
	})
}

// Fencing numbers are exact integers well beyond what a float64 (Lua's
// number) counts exactly near them, and come back as such.
func TestLock_Fence_matchesCounter(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, rc := newClient(t, s, nil)
		key := "{" + redistest.Key(t, "fenced") + "}"
		for range 3 {
			f := obtainFenced(t, ctx, c, key)
			got, err := rc.Get(ctx, fenceKey(t, key)).Result()
			if err != nil || got != strconv.FormatInt(f, 10) {
				t.Errorf("fence %d, counter %q (%v): want the counter to hold the fence", f, got, err)
			}
		}
	})
}

// blockingRetry reports each Backoff on called and waits an hour, so a test
// knows when Obtain is waiting for a held lock.
type blockingRetry struct{ called chan<- int }

func (r blockingRetry) Backoff(attempt int) time.Duration {
	r.called <- attempt
	return time.Hour
}

// A wait for a held lock ended by the caller's cancellation returns
// errors.Join(ErrNotObtained, context.Canceled), from Obtain and from Do.
func TestClient_Obtain_cancelledWhileWaiting(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	c, _ := newClient(t, s, nil)
	for _, name := range []string{"Obtain", "Do"} {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			key := redistest.Key(t, "held")
			other, err := c.Obtain(ctx, key, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Release(ctx)
			called := make(chan int, 1)
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			retry, maxWait := lock.WithRetry(blockingRetry{called}), lock.WithMaxWait(time.Hour)
			errs := make(chan error, 1)
			go func() {
				if name == "Obtain" {
					_, err := c.Obtain(wctx, key, time.Minute, retry, maxWait)
					errs <- err
					return
				}
				errs <- c.Do(wctx, key, time.Minute, func(context.Context) error { return errors.New("ran") },
					retry, maxWait)
			}()
			select {
			case <-called: // the first attempt found the lock held; now it waits
			case <-ctx.Done():
				t.Fatal("no retry was scheduled")
			}
			cancel()
			select {
			case err := <-errs:
				if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
					t.Errorf("err = %v; want errors.Join(ErrNotObtained, context.Canceled)", err)
				}
			case <-ctx.Done():
				t.Fatal("the wait did not end when its context was cancelled")
			}
		})
	}
}

// The failover the package doc warns about, with real replication: the
// replica is promoted after it received the first acquisition but not the
// next two, the last of which still holds the lock on the old master. The
// promoted replica lets a second holder in; its fence must exceed the
// first holder's, so that a fenced store turns the first away. Before,
// the replica's counter had missed the same increments and handed out a
// number the old master had already drawn.
func TestLock_Fence_failoverToLaggingReplica(t *testing.T) {
	for _, kind := range []redistest.Kind{redistest.Redis7, redistest.Redis8, redistest.Valkey} {
		t.Run(string(kind), func(t *testing.T) {
			ctx := testCtx(t)
			master, replica := redistest.Start(t, kind), redistest.Start(t, kind)
			cm, mrc := newClient(t, master, nil)
			cr, rrc := newClient(t, replica, nil)
			// A full sync waits 5s by default for more replicas to join.
			if err := mrc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
				t.Fatal(err)
			}
			host, port, _ := strings.Cut(master.Addrs()[0], ":")
			if err := rrc.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
				t.Fatal(err)
			}
			key := "{" + redistest.Key(t, "fenced") + "}"
			first := obtainFenced(t, ctx, cm, key)
			// The replica has the first acquisition. (Not WAIT on mrc: a
			// connection that wrote nothing counts a replica at once,
			// even one still loading its first sync.)
			redistest.WaitFor(t, ctx, "the replica's counter at the first fence", func() bool {
				got, err := rrc.Get(ctx, fenceKey(t, key)).Int64()
				return err == nil && got == first
			})
			if err := rrc.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
				t.Fatal(err)
			}
			obtainFenced(t, ctx, cm, key)
			held, err := cm.Obtain(ctx, key, time.Minute, lock.WithFencing())
			if err != nil {
				t.Fatal(err)
			}
			second, err := cr.Obtain(ctx, key, time.Minute, lock.WithFencing())
			if err != nil {
				t.Fatalf("Obtain on the promoted replica: %v", err)
			}
			if second.Fence() <= held.Fence() {
				t.Errorf("fences: %d (first), %d held on the old master, %d from the promoted replica: not above the old holder's",
					first, held.Fence(), second.Fence())
			}
		})
	}
}

func TestLock_Replace(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		var rec recorder
		var logs syncBuffer
		c, rc := newClient(t, s, &lock.Options{Observer: rec.observe, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		key := redistest.Key(t, "slot")
		l, err := c.Obtain(ctx, key, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		rec.take()
		if err := l.Replace(ctx, "result", 0); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("Replace with ttl 0 = %v, want ErrInvalid", err)
		}
		if err := l.Replace(ctx, "result", time.Hour); err != nil {
			t.Fatalf("Replace: %v", err)
		}
		if v, err := rc.Get(ctx, key).Result(); err != nil || v != "result" {
			t.Fatalf("after Replace: %q, %v", v, err)
		}
		if ttl := rc.PTTL(ctx, key).Val(); ttl < 59*time.Minute {
			t.Errorf("TTL after Replace = %v, want about 1h", ttl)
		}
		if got := kinds(rec.take()); !slices.Equal(got, []lock.EventKind{lock.EventReleased}) {
			t.Errorf("events of Replace: %v, want [released]", got)
		}
		if err := l.Replace(ctx, "again", time.Hour); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("second Replace = %v, want ErrNotHeld", err)
		}
		if got := rec.take(); len(got) != 1 || got[0].Kind != lock.EventReleaseFailed || !errors.Is(got[0].Err, lock.ErrNotHeld) {
			t.Errorf("events of a Replace not held: %+v, want one release-failed with ErrNotHeld", got)
		}
		// Deleted behind the holder's back: Replace must not recreate it.
		l, err = c.Obtain(ctx, key+":2", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		rc.Del(ctx, key+":2")
		if err := l.Replace(ctx, "late", time.Hour); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Replace after Delete = %v, want ErrNotHeld", err)
		}
		if n := rc.Exists(ctx, key+":2").Val(); n != 0 {
			t.Error("Replace recreated a deleted key")
		}
		// Finding the lock gone is Replace's answer, not a warning.
		if out := logs.String(); out != "" {
			t.Errorf("Replace logged: %s", out)
		}
	})
}

// TestLock_ReplaceAndPublish: the message goes out in the write's script
// exactly when the lock was replaced (a subscriber receives it before a
// marker published after the call), with Replace's events; a lock that a
// Set took meanwhile, or that is gone, gets ErrNotHeld and no message. On
// a Cluster a channel in another slot than the key's cannot share the
// script: the lock is replaced as Replace does, and the error says that
// nothing was published.
func TestLock_ReplaceAndPublish(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		var rec recorder
		c, rc := newClient(t, s, &lock.Options{Observer: rec.observe})
		sharded := s.Kind != redistest.Miniredis
		for _, tc := range []struct {
			name    string
			setter  string // what a Set wrote over the lock before the call, or "" for none
			channel string // the channel's suffix: "" for the key's own ":ann"
			want    error
			events  []lock.EventKind
		}{
			{name: "held", want: nil, events: []lock.EventKind{lock.EventReleased}},
			{name: "taken by a Set", setter: "the Set's value", want: lock.ErrNotHeld, events: []lock.EventKind{lock.EventReleaseFailed}},
			{name: "other slot", channel: "elsewhere", events: []lock.EventKind{lock.EventReleased}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				key := "{" + redistest.Key(t, "") + "}"
				channel := key + ":ann"
				if tc.channel != "" {
					channel = redistest.Key(t, tc.channel)
				}
				next := redistest.Subscribe(t, ctx, rc, channel, sharded)
				l, err := c.Obtain(ctx, key, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if tc.setter != "" {
					if err := rc.Set(ctx, key, tc.setter, 0).Err(); err != nil {
						t.Fatal(err)
					}
				}
				rec.take()
				err = l.ReplaceAndPublish(ctx, "result", time.Hour, channel, "stored", sharded)
				published, stored := err == nil, "result"
				switch {
				case tc.setter != "":
					stored = tc.setter
					if !errors.Is(err, tc.want) {
						t.Fatalf("ReplaceAndPublish = %v, want %v", err, tc.want)
					}
				case tc.channel != "" && s.Kind == redistest.Cluster:
					if !errors.Is(err, lock.ErrNotPublished) {
						t.Fatalf("ReplaceAndPublish = %v, want ErrNotPublished", err)
					}
				case err != nil:
					t.Fatalf("ReplaceAndPublish = %v, want nil", err)
				}
				if got := kinds(rec.take()); !slices.Equal(got, tc.events) {
					t.Errorf("events: %v, want %v", got, tc.events)
				}
				if v, err := rc.Get(ctx, key).Result(); err != nil || v != stored {
					t.Errorf("the key holds %q, %v; want %q", v, err, stored)
				}
				publish(t, ctx, rc, channel, "marker", sharded)
				first := "marker"
				if published {
					first = "stored"
				}
				if got := next(); got != first {
					t.Errorf("the subscriber received %q first, want %q", got, first)
				}
			})
		}
		l, err := c.Obtain(ctx, redistest.Key(t, "invalid"), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.ReplaceAndPublish(ctx, "result", 0, "ch", "m", sharded); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("ReplaceAndPublish with ttl 0 = %v, want ErrInvalid", err)
		}
		if err := l.ReplaceAndPublish(ctx, "result", time.Hour, "", "m", sharded); !errors.Is(err, lock.ErrInvalid) {
			t.Errorf("ReplaceAndPublish without a channel = %v, want ErrInvalid", err)
		}
	})
}

// publish publishes msg on channel (SPUBLISH when sharded).
func publish(tb testing.TB, ctx context.Context, rc redis.UniversalClient, channel, msg string, sharded bool) {
	tb.Helper()
	var err error
	if sharded {
		err = rc.SPublish(ctx, channel, msg).Err()
	} else {
		err = rc.Publish(ctx, channel, msg).Err()
	}
	if err != nil {
		tb.Fatalf("publishing %q: %v", msg, err)
	}
}

// TestKeys_layout: the companion keys and channel of a lock are named as
// docs/permissions.md, docs/locks.md and the package doc spell them for
// ACL rules: {key}:suffix, or key:suffix for a key with a hash tag.
func TestKeys_layout(t *testing.T) {
	for _, tt := range []struct {
		key, fence, queue, channel string
	}{
		{"jobs:1", "{jobs:1}:fence", "{jobs:1}:queue", "{jobs:1}:handoff"},
		{"jobs:{1}", "jobs:{1}:fence", "jobs:{1}:queue", "jobs:{1}:handoff"},
	} {
		fence, ok1 := lock.FenceKey(tt.key)
		queue, ok2 := lock.QueueKey(tt.key)
		channel, ok3 := lock.HandoffChannel(tt.key)
		if fence != tt.fence || queue != tt.queue || channel != tt.channel || !ok1 || !ok2 || !ok3 {
			t.Errorf("%q: fence %q, queue %q, channel %q; want %q, %q, %q",
				tt.key, fence, queue, channel, tt.fence, tt.queue, tt.channel)
		}
	}
	if _, ok := lock.FenceKey("a}b"); ok {
		t.Error(`FenceKey("a}b") is ok; want not (a '}' but no hash tag)`)
	}
}
