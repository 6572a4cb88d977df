package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	redistest.Main(m, workers)
}

// newCache returns a Cache on s in a namespace of its own, closed at the
// end of the test.
func newCache(tb testing.TB, s *redistest.Server, opts *cache.Options) (*cache.Cache, redis.UniversalClient) {
	tb.Helper()
	rc := s.Client(tb)
	return newCacheOn(tb, rc, opts), rc
}

func newCacheOn(tb testing.TB, rc cache.RedisClient, opts *cache.Options) *cache.Cache {
	tb.Helper()
	o := cache.Options{}
	if opts != nil {
		o = *opts
	}
	if o.Namespace == "" {
		o.Namespace = namespace(tb)
	}
	c, err := cache.New(rc, &o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// namespace is unique per test, so tests can share servers.
func namespace(tb testing.TB) string {
	return "t" + redistest.Key(tb, "")[len("test:"):]
}

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	tb.Cleanup(cancel)
	return ctx
}
