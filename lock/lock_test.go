package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/lockx"
	"github.com/hotkv/stampede/internal/redistest"
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
	c, err := lock.New(lockx.Force(rc, caps), nil)
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

	l, err := c.Obtain(ctx, key, time.Minute, &lock.ObtainOptions{Metadata: meta})
	if err != nil {
		t.Fatalf("Obtain: %v", err)
	}
	if len(l.Token()) != 32 || l.Key() != key || l.Metadata() != meta {
		t.Fatalf("lock = token %q key %q meta %d bytes", l.Token(), l.Key(), len(l.Metadata()))
	}
	if _, err := other.Obtain(ctx, key, time.Minute, nil); !errors.Is(err, lock.ErrNotObtained) {
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
	l, err = c.Obtain(ctx, key, time.Minute, &lock.ObtainOptions{Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Del(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	l2, err := other.Obtain(ctx, key, 30*time.Second, &lock.ObtainOptions{Metadata: meta})
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
			l, err := c.Obtain(ctx, key, time.Minute, &lock.ObtainOptions{Metadata: tt.meta})
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
		{"nil client", func() error { _, err := lock.New(nil, nil); return err }, "nil Redis client"},
		{"typed nil client", func() error { var rdb *redis.Client; _, err := lock.New(rdb, nil); return err }, "nil Redis client"},
		{"negative threshold", func() error { _, err := lock.New(rc, &lock.Options{DigestThreshold: -1}); return err }, "DigestThreshold"},
		{"empty key", func() error { _, err := c.Obtain(ctx, "", time.Second, nil); return err }, "empty key"},
		{"zero ttl", func() error { _, err := c.Obtain(ctx, "k", 0, nil); return err }, "below 1ms"},
		{"sub-ms ttl", func() error { _, err := c.Obtain(ctx, "k", time.Microsecond, nil); return err }, "below 1ms"},
		{"negative ttl", func() error { _, err := c.Obtain(ctx, "k", -time.Second, nil); return err }, "below 1ms"},
		{"huge metadata", func() error {
			_, err := c.Obtain(ctx, "k", time.Second, &lock.ObtainOptions{Metadata: strings.Repeat("m", lock.DefaultMaxMetadata+1)})
			return err
		}, "exceeds MaxMetadata"},
		{"negative MaxWait", func() error { _, err := c.Obtain(ctx, "k", time.Second, &lock.ObtainOptions{MaxWait: -1}); return err }, "MaxWait"},
		{"fencing without slot", func() error {
			_, err := c.Obtain(ctx, "a}b", time.Second, &lock.ObtainOptions{Fencing: true})
			return err
		}, "cluster slot"},
		{"Do nil fn", func() error { return c.Do(ctx, "k", time.Second, nil, nil) }, "nil fn"},
		{"Do empty key", func() error { return c.Do(ctx, "", time.Second, nop, nil) }, "empty key"},
		{"Do refresh >= ttl", func() error { return c.Do(ctx, "k", time.Second, nop, &lock.DoOptions{RefreshEvery: time.Second}) }, "RefreshEvery"},
		{"RunOnce nil fn", func() error { _, err := c.RunOnce(ctx, "k", time.Second, nil, nil); return err }, "nil fn"},
		{"RunOnce MinHold > maxHold", func() error {
			_, err := c.RunOnce(ctx, "k", time.Second, nop, &lock.RunOnceOptions{MinHold: time.Minute})
			return err
		}, "MinHold"},
		{"RunOnce zero maxHold", func() error { _, err := c.RunOnce(ctx, "k", 0, nop, nil); return err }, "below 1ms"},
		{"Inspect empty key", func() error { _, err := c.Inspect(ctx, ""); return err }, "empty key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "lock: ") {
				t.Errorf("error = %v, want ErrInvalid naming %q", err, tt.want)
			}
		})
	}
}
