package main

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// TestProxy: through the proxy, a response with explicit freshness is
// rendered by the origin once and then served from the cache; with
// -explicit, one without freshness is not stored, and without -explicit it
// is, for -ttl.
func TestProxy(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		if r.URL.Path == "/fresh" {
			w.Header().Set("Cache-Control", "max-age=60")
		}
		fmt.Fprintf(w, "render %d of %s", n, r.URL.Path)
	}))
	defer origin.Close()
	u, _ := url.Parse(origin.URL)

	for _, tt := range []struct {
		explicit   bool
		path       string
		wantStored bool
	}{
		{true, "/fresh", true},
		{true, "/plain", false},
		{false, "/plain", true},
	} {
		t.Run(fmt.Sprintf("explicit=%v%s", tt.explicit, tt.path), func(t *testing.T) {
			h, closeCache, err := handler(s.Client(t), u, config{namespace: redistest.Key(t, "proxy"), ttl: time.Minute, explicit: tt.explicit})
			if err != nil {
				t.Fatal(err)
			}
			defer closeCache()
			proxy := httptest.NewServer(h)
			defer proxy.Close()
			var bodies []string
			for range 2 {
				resp, err := http.Get(proxy.URL + tt.path)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %d", resp.StatusCode)
				}
				bodies = append(bodies, string(b))
			}
			if stored := bodies[0] == bodies[1]; stored != tt.wantStored {
				t.Errorf("bodies %q: stored %v, want %v", bodies, stored, tt.wantStored)
			}
		})
	}
}
