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
// is, for -ttl; with -heuristic, one with Last-Modified is stored.
func TestProxy(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		switch r.URL.Path {
		case "/fresh":
			w.Header().Set("Cache-Control", "max-age=60")
		case "/modified":
			w.Header().Set("Last-Modified", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat))
		}
		fmt.Fprintf(w, "render %d of %s", n, r.URL.Path)
	}))
	defer origin.Close()
	u, _ := url.Parse(origin.URL)

	for _, tt := range []struct {
		explicit   bool
		heuristic  float64
		path       string
		wantStored bool
	}{
		{true, 0, "/fresh", true},
		{true, 0, "/plain", false},
		{false, 0, "/plain", true},
		{true, 0, "/modified", false},
		{true, 0.1, "/modified", true},
		{true, 0.1, "/plain", false},
	} {
		t.Run(fmt.Sprintf("explicit=%v,heuristic=%v%s", tt.explicit, tt.heuristic, tt.path), func(t *testing.T) {
			cfg := config{namespace: redistest.Key(t, "proxy"), ttl: time.Minute, explicit: tt.explicit, heuristic: tt.heuristic, heuristicMax: 24 * time.Hour}
			h, closeCache, err := handler(s.Client(t), u, cfg)
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
