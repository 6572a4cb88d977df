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
	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/faultproxy"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"
)

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

// WaitTimeout holds even when it is not shorter than LoadTimeout: the wait
// and the load have limits of their own.
func TestGetOrLoad_waitTimeoutEqualsLoadTimeout(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	ns := namespace(t)
	rc := s.Client(t)
	holder := newCacheOn(t, rc, &cache.Options{Namespace: ns, LoadTimeout: time.Minute})
	release := make(chan struct{})
	loading := make(chan struct{})
	held := make(chan error, 1)
	go func() {
		_, err := cache.GetOrLoad(ctx, holder, "k", func(ctx context.Context) (string, error) {
			close(loading)
			<-release
			return "holder's", nil
		})
		held <- err
	}()
	<-loading
	defer func() { close(release); <-held }()

	for _, fallback := range []bool{false, true} {
		waiter := newCacheOn(t, rc, &cache.Options{Namespace: ns, WaitTimeout: 300 * time.Millisecond,
			LoadTimeout: 300 * time.Millisecond, PollInterval: 50 * time.Millisecond, LoadOnWaitTimeout: fallback})
		v, err := cache.GetOrLoad(ctx, waiter, "k", func(context.Context) (string, error) { return "own", nil })
		if fallback {
			if err != nil || v != "own" {
				t.Errorf("LoadOnWaitTimeout: %q, %v; want its own load", v, err)
			}
		} else if !errors.Is(err, cache.ErrWaitTimeout) {
			t.Errorf("err = %v, want ErrWaitTimeout", err)
		}
		if st := waiter.Stats(); st.WaitTimeouts != 1 {
			t.Errorf("WaitTimeouts = %d, want 1", st.WaitTimeouts)
		}
	}
}

// Expire, called by a loader, decides the stored value's freshness.
func TestExpire(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	ns := namespace(t)
	c, rc := newCache(t, s, &cache.Options{Namespace: ns, TTL: time.Hour})
	set := false
	_, err := cache.GetOrLoad(ctx, c, "token", func(ctx context.Context) (string, error) {
		set = cache.Expire(ctx, 2*time.Minute, 3*time.Minute)
		return "t", nil
	})
	if err != nil || !set {
		t.Fatalf("GetOrLoad: %v; Expire reported %t", err, set)
	}
	ttl := rc.PTTL(ctx, ns+":{token}").Val()
	if ttl <= 4*time.Minute || ttl > 5*time.Minute {
		t.Errorf("stored TTL = %v, want fresh+stale = 5m", ttl)
	}
	if cache.Expire(ctx, time.Minute, 0) {
		t.Error("Expire outside a loader reported true")
	}
}

// A caller that starts after Delete or Set returned must not join a load
// that began before it: it gets what the server holds now (a new load
// after Delete, the set value after Set), while the earlier caller still
// gets its own load's result, which is not stored.
func TestGetOrLoad_afterDeleteOrSetStartsAfresh(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(ctx context.Context, c *cache.Cache) error
		want   string
	}{
		{"Delete", func(ctx context.Context, c *cache.Cache) error { return c.Delete(ctx, "k") }, "loaded after"},
		{"Set", func(ctx context.Context, c *cache.Cache) error { return cache.Set(ctx, c, "k", "set") }, "set"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
				ctx := testCtx(t)
				c, _ := newCache(t, s, nil)
				wait, open := gate(t)
				loading := make(chan struct{})
				before := goGetOrLoad(ctx, c, "k", func(context.Context) (string, error) {
					close(loading)
					<-wait
					return "loaded before", nil
				})
				redistest.Recv(t, ctx, loading, "the first load to start")
				if err := tt.change(ctx, c); err != nil {
					t.Fatal(err)
				}
				// The first load is still blocked: joining it would hang here.
				after := goGetOrLoad(ctx, c, "k", func(context.Context) (string, error) { return "loaded after", nil })
				if r := redistest.Recv(t, ctx, after, "the caller after "+tt.name); r.err != nil || r.v != tt.want {
					t.Fatalf("GetOrLoad after %s = %q, %v; want %q", tt.name, r.v, r.err, tt.want)
				}
				open()
				if r := redistest.Recv(t, ctx, before, "the caller before"); r.err != nil || r.v != "loaded before" {
					t.Fatalf("GetOrLoad before %s = %q, %v; want its own load", tt.name, r.v, r.err)
				}
				redistest.WaitFor(t, ctx, "the first load's write to be skipped", func() bool { return c.Stats().WritesSkipped == 1 })
				if v, err := cache.Get[string](ctx, c, "k"); err != nil || v != tt.want {
					t.Errorf("stored afterwards: %q, %v; want %q", v, err, tt.want)
				}
			}, redistest.Redis8, redistest.Redis7)
		})
	}
}

// A waiter takes a value from an announcement only if it comes from the
// rebuild whose claim the waiter saw: an announcement of an older rebuild
// (say, one published after a Delete) only makes it read the key again.
func TestGetOrLoad_announcementOfAnotherClaimIsNotTaken(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	ns := namespace(t)
	c, rc := newCache(t, s, &cache.Options{Namespace: ns, WaitTimeout: time.Minute, PollInterval: 20 * time.Millisecond, Broadcast: true}) // the test publishes on NS:announce
	locks, err := lock.New(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	stored := valueKey(ns, "k")
	claim, err := locks.Obtain(ctx, stored, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	got := goGetOrLoad(ctx, c, "k", neverLoad[string](&calls))
	redistest.WaitFor(t, ctx, "the waiter to wait", func() bool { return c.Stats().Waits == 1 })

	payload, err := msgpack.Marshal("from an older rebuild")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	old := codec.Append(nil, codec.Entry{Written: now, FreshUntil: now.Add(time.Hour), Payload: payload})
	foreign := strings.Repeat("0", 32)
	if err := rc.Publish(ctx, ns+":announce", "v"+stored+"\x00"+foreign+"\x00"+string(old)).Err(); err != nil {
		t.Fatal(err)
	}
	// Then the claim's own rebuild reports a failure, repeatedly, since a
	// message sent while the waiter re-reads the key would be missed.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case r := <-got:
			if !errors.Is(r.err, cache.ErrRemoteLoad) || !strings.Contains(r.err.Error(), "the claim's own") {
				t.Fatalf("waiter got %q, %v; want the claim's ErrRemoteLoad, not the older rebuild's value", r.v, r.err)
			}
			if calls.Load() != 0 {
				t.Fatalf("the waiter loaded %d times", calls.Load())
			}
			return
		case <-tick.C:
			msg := "e" + stored + "\x00" + claim.Token() + "\x00the claim's own failure"
			if err := rc.Publish(ctx, ns+":announce", msg).Err(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("the waiter never returned")
		}
	}
}

// An entry written without a stale window is not served as stale or
// refreshed in the moment between its FreshUntil (computed before the
// write) and the server's expiry (counted from the write's arrival).
func TestGetOrLoad_noStaleWindowStaysFreshUntilGone(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	clk := newClock()
	c, _ := newCache(t, s, &cache.Options{TTL: time.Minute, Now: clk.Now})
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

// When the write after a load fails because the server stopped answering,
// the rebuilder does not also wait out a timeout to announce the result:
// its callers get the value after one timeout, and waiters elsewhere
// find the result by polling.
func TestGetOrLoad_noAnnouncementAfterFailedWrite(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	p, err := faultproxy.Start(s.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	rc := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { rc.Close() })
	rec := record(rc)
	c := newCacheOn(t, rc, &cache.Options{FailOpenCooldown: time.Minute})
	// A first load settles the capability probe, so the one below writes
	// straight away.
	if _, err := cache.GetOrLoad(ctx, c, "warm", func(context.Context) (string, error) { return "w", nil }); err != nil {
		t.Fatal(err)
	}
	rec.reset()
	v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) {
		p.BlackHole() // everything after the load meets a dead server
		return "loaded", nil
	})
	if err != nil || v != "loaded" {
		t.Fatalf("GetOrLoad = %q, %v; want the loaded value", v, err)
	}
	var names []string
	for _, cmd := range rec.reset() {
		names = append(names, cmd[0])
	}
	if slices.Contains(names, "publish") {
		t.Errorf("commands %v: an announcement was attempted after the write failed", names)
	}
	if st := c.Stats(); st.ServerErrors == 0 {
		t.Errorf("stats %+v: the failed write was not counted", st)
	}
}
