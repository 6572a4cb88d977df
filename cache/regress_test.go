package cache_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
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
