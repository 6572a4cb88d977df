package middleware_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/faultproxy"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
	"github.com/redis/go-redis/v9"
)

// TestMiddleware_setupFaults: while the server refuses the connection (a
// wrong password, a database that does not exist) or closes it after the
// handshake, every request gets the handler's response, and none says it
// was stored (Cache-Status "stored") when nothing was written.
func TestMiddleware_setupFaults(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	open := func(t *testing.T, o *redis.Options) *redis.Client {
		rc := redis.NewClient(o)
		t.Cleanup(func() { _ = rc.Close() })
		return rc
	}
	faults := []struct {
		name   string
		client func(t *testing.T) *redis.Client
	}{
		{"wrong password", func(t *testing.T) *redis.Client {
			return open(t, &redis.Options{Addr: s.Addrs()[0], Username: "nobody", Password: "wrong"})
		}},
		{"DB 99", func(t *testing.T) *redis.Client {
			return open(t, &redis.Options{Addr: s.Addrs()[0], DB: 99})
		}},
		{"closed after handshake", func(t *testing.T) *redis.Client {
			p, err := faultproxy.Start(s.Addrs()[0])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			p.CloseAfter(1)
			return open(t, &redis.Options{Addr: p.Addr(), MaxRetries: -1, DisableIdentity: true})
		}},
		{"refused", func(t *testing.T) *redis.Client {
			p, err := faultproxy.Start(s.Addrs()[0])
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			p.Refuse()
			return open(t, &redis.Options{Addr: p.Addr(), MaxRetries: -1, DisableIdentity: true})
		}},
	}
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			c, err := cache.New(f.client(t), &cache.Options{Namespace: "t" + redistest.Key(t, "")[len("test:"):]})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			h := middleware.Cache(c, time.Minute)(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Cache-Control", "public, max-age=60")
				_, _ = w.Write([]byte("rendered"))
			}))
			for i := range 2 { // the first meets the fault; the second, a server known to be failing
				ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
				r := httptest.NewRequest(http.MethodGet, "/page", nil).WithContext(ctx)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				cancel()
				if w.Code != http.StatusOK || w.Body.String() != "rendered" {
					t.Fatalf("request %d: %d %q", i, w.Code, w.Body.String())
				}
				if cs := w.Header().Get("Cache-Status"); strings.Contains(cs, "stored") {
					t.Errorf("request %d: Cache-Status %q, X-Cache %q: nothing was stored", i, cs, w.Header().Get("X-Cache"))
				}
			}
		})
	}
}
