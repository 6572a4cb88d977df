package middleware_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

// TestACL_middleware_leastPrivilege: the middleware needs nothing beyond
// its Cache's permissions (redistest.CachePerms, docs/permissions.md): as
// a user holding just those, a response is rendered once and
// then served from the cache.
func TestACL_middleware_leastPrivilege(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ns := "acl" + strings.NewReplacer("/", ".").Replace(redistest.Key(t, "")[len("test:"):])
		u := s.User(t, redistest.CachePerms(s.Kind, ns)...)
		c, err := cache.New(u.Client(t), &cache.Options{Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		var renders atomic.Int32
		h := middleware.Cache(c, time.Minute)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			renders.Add(1)
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "hello")
		}))
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		for i := range 2 {
			res, err := http.Get(srv.URL + "/x")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusOK || string(b) != "hello" {
				t.Fatalf("request %d: %s %q", i, res.Status, b)
			}
		}
		if n := renders.Load(); n != 1 {
			t.Errorf("renders = %d, want 1", n)
		}
		if st := c.Stats(); st.ServerErrors != 0 || st.FailOpenLoads != 0 {
			t.Errorf("stats %+v: want no server errors", st)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}
