package cache_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// A loader made with LoadWithExpiry decides the stored value's lifetime,
// as one calling Expire does; a zero Expiry keeps the call's.
func TestLoadWithExpiry(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	ns := namespace(t)
	c, rc := newCache(t, s, &cache.Options{Namespace: ns, Expiry: cache.ExpiryPolicy{Fresh: time.Hour}})
	for _, tt := range []struct {
		key      string
		e        cache.Expiry
		min, max time.Duration
	}{
		{"token", cache.Expiry{Fresh: 2 * time.Minute, Stale: 3 * time.Minute}, 4 * time.Minute, 5 * time.Minute},
		{"default", cache.Expiry{}, 59 * time.Minute, time.Hour},
	} {
		load := cache.LoadWithExpiry(func(ctx context.Context) (string, cache.Expiry, error) { return "t", tt.e, nil })
		if v, err := cache.GetOrLoad(ctx, c, tt.key, load); err != nil || v != "t" {
			t.Fatalf("GetOrLoad(%s) = %q, %v", tt.key, v, err)
		}
		if ttl := rc.PTTL(ctx, ns+":{"+tt.key+"}").Val(); ttl <= tt.min || ttl > tt.max {
			t.Errorf("%s: stored TTL = %v, want in (%v, %v]", tt.key, ttl, tt.min, tt.max)
		}
	}
}

// A value whose lifetime comes with it, e.g. an access token.
func ExampleLoadWithExpiry() {
	mr := miniredis.NewMiniRedis() // a real program connects to its Redis instead
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c, err := cache.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	fetchToken := func(ctx context.Context) (string, cache.Expiry, error) {
		// The issuer says the token is valid for 15 minutes: serve it for
		// 14, never stale.
		return "tok-123", cache.Expiry{Fresh: 14 * time.Minute}, nil
	}
	tok, err := cache.GetOrLoad(context.Background(), c, "token", cache.LoadWithExpiry(fetchToken))
	fmt.Println(tok, err, mr.TTL("stampede:{token}"))
	// Output: tok-123 <nil> 14m0s
}
