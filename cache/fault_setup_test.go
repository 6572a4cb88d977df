package cache_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// This file tests calls whose connection fails while it is set up, or
// right after: a wrong password, a database that does not exist, a server
// that closes the connection after the handshake. go-redis returns such a
// failure from a pipeline's Exec and sets it on none of its commands, so
// a call that reads only its commands' results sees empty replies.

// setupFault is a client whose every connection fails as its name says.
type setupFault struct {
	name string
	// reply is what the server answered, which the error must carry
	// (errors.As finds a redis.Error); "" for a broken connection, where
	// the cache fails open instead.
	reply  string
	client func(tb testing.TB, s *redistest.Server) *redis.Client
}

func setupFaults() []setupFault {
	open := func(tb testing.TB, o *redis.Options) *redis.Client {
		tb.Helper()
		rc := redis.NewClient(o)
		tb.Cleanup(func() { _ = rc.Close() })
		return rc
	}
	return []setupFault{
		{"wrong password", "WRONGPASS", func(tb testing.TB, s *redistest.Server) *redis.Client {
			return open(tb, &redis.Options{Addr: s.Addrs()[0], Username: "nobody", Password: "wrong"})
		}},
		{"DB 99", "ERR DB index is out of range", func(tb testing.TB, s *redistest.Server) *redis.Client {
			return open(tb, &redis.Options{Addr: s.Addrs()[0], DB: 99})
		}},
		{"closed after handshake", "", func(tb testing.TB, s *redistest.Server) *redis.Client {
			p := startProxy(tb, s.Addrs()[0])
			p.CloseAfter(1)
			return open(tb, &redis.Options{Addr: p.Addr(), MaxRetries: -1, DisableIdentity: true})
		}},
	}
}

// checkSetupFault fails tb unless err is what a call meeting f must
// return: an error carrying the server's reply, or (reply "") any error
// that is not a miss.
func checkSetupFault(tb testing.TB, f setupFault, err error) {
	tb.Helper()
	var re redis.Error
	switch {
	case err == nil:
		tb.Fatal("no error")
	case errors.Is(err, cache.ErrMiss):
		tb.Fatalf("a miss, not the failure: %v", err)
	case f.reply != "" && (!strings.Contains(err.Error(), f.reply) || !errors.As(err, &re)):
		tb.Fatalf("error %v (%T) does not carry the server's reply %q", err, err, f.reply)
	}
}

// TestCache_setupFaults runs every call against every setup fault: each
// fails with the server's reply (or, on a broken connection, loads
// without the server), and Stats counts the failure.
func TestCache_setupFaults(t *testing.T) {
	calls := []struct {
		name string
		// call returns what the caller got; loaded reports that it is the
		// loader's value, which a fail-open load returns without error.
		call func(ctx context.Context, c *cache.Cache, key string) (loaded bool, err error)
	}{
		{"Get", func(ctx context.Context, c *cache.Cache, key string) (bool, error) {
			_, err := cache.Get[string](ctx, c, key)
			return false, err
		}},
		{"Set", func(ctx context.Context, c *cache.Cache, key string) (bool, error) {
			return false, cache.Set(ctx, c, key, "v")
		}},
		{"Delete", func(ctx context.Context, c *cache.Cache, key string) (bool, error) {
			return false, c.Delete(ctx, key)
		}},
		{"GetOrLoad", func(ctx context.Context, c *cache.Cache, key string) (bool, error) {
			v, err := cache.GetOrLoad(ctx, c, key, func(context.Context) (string, error) { return "loaded", nil })
			return err == nil && v == "loaded", err
		}},
		{"GetOrLoadMany", func(ctx context.Context, c *cache.Cache, key string) (bool, error) {
			keys := []string{key, key + "-2"}
			m, err := cache.GetOrLoadMany(ctx, c, keys, func(_ context.Context, ks []string) (map[string]string, error) {
				out := make(map[string]string, len(ks))
				for _, k := range ks {
					out[k] = "loaded"
				}
				return out, nil
			})
			return err == nil && len(m) == len(keys) && m[key] == "loaded" && m[key+"-2"] == "loaded", err
		}},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, f := range setupFaults() {
			t.Run(f.name, func(t *testing.T) {
				for _, tc := range calls {
					t.Run(tc.name, func(t *testing.T) {
						c := newCacheOn(t, f.client(t, s), nil)
						loaded, err := tc.call(testCtx(t), c, "k")
						st := c.Stats()
						if f.reply == "" && loaded {
							if st.FailOpenLoads == 0 {
								t.Errorf("loaded without the server, but Stats().FailOpenLoads is 0: %+v", st)
							}
						} else {
							checkSetupFault(t, f, err)
						}
						if st.ServerErrors == 0 {
							t.Errorf("Stats().ServerErrors is 0 after %v", err)
						}
					})
				}
			})
		}
	}, redistest.Redis8, redistest.Valkey)
}

// TestCache_capabilitiesAfterWrongPassword: a probe that met a wrong
// password is no answer. Once the password is right, the same Cache
// reports what a new one does, not the Lua fallbacks for good.
func TestCache_capabilitiesAfterWrongPassword(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		u := s.User(t, "~*", "&*", "+@all")
		rc := redis.NewClient(&redis.Options{Addr: s.Addrs()[0], Username: u.Name, Password: u.Password + "-fixed"})
		t.Cleanup(func() { _ = rc.Close() })
		c := newCacheOn(t, rc, nil)
		if caps, err := c.Capabilities(ctx); err == nil {
			t.Fatalf("Capabilities with a wrong password: %v, no error", caps)
		}
		u.Password += "-fixed" // the operator fixes the password
		if err := u.Set("~*", "&*", "+@all"); err != nil {
			t.Fatal(err)
		}
		got, err := c.Capabilities(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want, err := newCacheOn(t, rc, nil).Capabilities(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("after the password was fixed: %v; a new Cache: %v", got, want)
		}
	}, redistest.Redis8, redistest.Valkey)
}
