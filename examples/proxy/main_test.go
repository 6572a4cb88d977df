package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
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
			cfg := config{namespace: redistest.Key(t, "proxy"), opts: middleware.Options{
				Freshness: middleware.FreshnessPolicy{Fresh: time.Minute, Explicit: tt.explicit, Heuristic: tt.heuristic, HeuristicMaxAge: 24 * time.Hour},
			}}
			proxy := startProxy(t, s, u, cfg)
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

// TestProxy_chunked: an origin response without Content-Length (chunked:
// the origin flushes, and httputil.ReverseProxy then flushes after every
// write) is stored when it says how long it is fresh, and served from the
// cache whole; one that cannot be stored (an event stream, one without
// freshness under the preset's -explicit) still streams through: its
// first chunk reaches the client while the origin is still writing
// (issue 39).
func TestProxy_chunked(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var renders atomic.Int64
	release := map[string]chan struct{}{"/events": make(chan struct{}), "/dynamic": make(chan struct{})}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		switch r.URL.Path {
		case "/fresh":
			w.Header().Set("Cache-Control", "max-age=60")
		case "/events":
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "max-age=60")
		}
		fmt.Fprintf(w, "render %d of %s;", n, r.URL.Path)
		if err := http.NewResponseController(w).Flush(); err != nil {
			panic(err)
		}
		if r.URL.Path != "/fresh" {
			select { // until the client has read the first chunk
			case <-release[r.URL.Path]:
			case <-ctx.Done():
			}
		}
		fmt.Fprint(w, " the rest")
	}))
	defer origin.Close()
	u, _ := url.Parse(origin.URL)
	cfg, err := parseFlags(nil) // the preset
	if err != nil {
		t.Fatal(err)
	}
	cfg.namespace = redistest.Key(t, "proxy")
	proxy := startProxy(t, s, u, cfg)
	get := func(path string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, proxy.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	t.Run("stored", func(t *testing.T) {
		for i, want := range []string{"MISS", "HIT"} {
			resp := get("/fresh")
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || resp.Header.Get("X-Cache") != want || string(b) != "render 1 of /fresh; the rest" {
				t.Errorf("request %d: %d X-Cache=%s %q, %v; want 200 %s with the whole first render", i+1, resp.StatusCode, resp.Header.Get("X-Cache"), b, err, want)
			}
		}
		if n := renders.Load(); n != 1 {
			t.Errorf("the origin was called %d times, want once", n)
		}
	})
	for _, path := range []string{"/events", "/dynamic"} {
		t.Run("streamed "+path, func(t *testing.T) {
			before := renders.Load()
			resp := get(path)
			defer resp.Body.Close()
			first := fmt.Sprintf("render %d of %s;", before+1, path)
			head := make([]byte, len(first))
			if _, err := io.ReadFull(resp.Body, head); err != nil || string(head) != first {
				t.Fatalf("read %q, %v while the origin was writing; want %q", head, err, first)
			}
			if got := resp.Header.Get("X-Cache"); got != "BYPASS" {
				t.Errorf("X-Cache = %q, want BYPASS", got)
			}
			close(release[path])
			if rest, err := io.ReadAll(resp.Body); err != nil || string(rest) != " the rest" {
				t.Errorf("rest = %q, %v", rest, err)
			}
		})
	}
}

// TestParseFlags: the proxy starts from SharedOptions, or with
// -shared=false from the defaults, and each flag changes its one field,
// wherever it comes on the command line.
func TestParseFlags(t *testing.T) {
	preset := *middleware.SharedOptions()
	preset.Freshness.Fresh, preset.Freshness.HeuristicMaxAge = time.Minute, 24*time.Hour
	for _, tt := range []struct {
		name string
		args []string
		want func(o *middleware.Options)
	}{
		{"preset", nil, func(o *middleware.Options) { *o = preset }},
		{"as cache-tests.sh ran it before", []string{"-explicit", "-heuristic", "0.1", "-surrogate-control", "-revalidate-no-cache", "-allow-no-cache", "-cache-cookies"}, func(o *middleware.Options) { *o = preset }},
		{"defaults", []string{"-shared=false"}, func(o *middleware.Options) {}},
		{"own targeted field first", []string{"-targeted", "Proxy-Cache-Control, CDN-Cache-Control"}, func(o *middleware.Options) {
			*o = preset
			o.Targeted = []string{"Proxy-Cache-Control", "CDN-Cache-Control"}
		}},
		{"stale-if-error", []string{"-stale-if-error", "1h"}, func(o *middleware.Options) {
			*o = preset
			o.Freshness.StaleIfError = time.Hour
		}},
		{"no targeted field", []string{"-targeted", ""}, func(o *middleware.Options) {
			*o = preset
			o.Targeted = nil
		}},
		{"own tag field", []string{"-tags", "Xkey"}, func(o *middleware.Options) {
			*o = preset
			o.Tags.Headers = []string{"Xkey"}
		}},
		{"preset less one", []string{"-cache-cookies=false", "-stale-ttl", "30s"}, func(o *middleware.Options) {
			*o = preset
			o.CacheRequestsWithCookies, o.Freshness.Stale = false, 30*time.Second
		}},
		{"defaults plus one, in any order", []string{"-explicit", "-shared=false", "-ttl", "5m"}, func(o *middleware.Options) {
			o.Freshness.Explicit, o.Freshness.Fresh = true, 5*time.Minute
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := parseFlags(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			want := middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: time.Minute, HeuristicMaxAge: 24 * time.Hour}}
			tt.want(&want)
			if !reflect.DeepEqual(cfg.opts, want) {
				t.Errorf("parseFlags(%q).opts = %+v, want %+v", tt.args, cfg.opts, want)
			}
		})
	}
}

// TestParseFlags_purge: -purge accepts a PURGE only with the secret of
// PURGE_KEY in X-Purge-Key, and refuses to start without one.
func TestParseFlags_purge(t *testing.T) {
	t.Setenv("PURGE_KEY", "")
	if _, err := parseFlags([]string{"-purge"}); err == nil || !strings.Contains(err.Error(), "PURGE_KEY") {
		t.Fatalf("-purge without PURGE_KEY: %v", err)
	}
	t.Setenv("PURGE_KEY", "s3cret")
	cfg, err := parseFlags([]string{"-purge"})
	if err != nil || cfg.opts.Purge == nil {
		t.Fatalf("-purge: %v, %+v", err, cfg.opts.Purge)
	}
	for _, tt := range []struct {
		lines []string
		want  bool
	}{
		{[]string{"s3cret"}, true}, {[]string{"s3cre"}, false}, {[]string{""}, false}, {[]string{"s3cret "}, false},
		{nil, false}, {[]string{"guess", "s3cret"}, false}, {[]string{"s3cret", "s3cret"}, false},
	} {
		r := httptest.NewRequest("PURGE", "/x", nil)
		r.Header["X-Purge-Key"] = tt.lines
		if got := cfg.opts.Purge.Authorize(r); got != tt.want {
			t.Errorf("X-Purge-Key lines %q: authorised %v, want %v", tt.lines, got, tt.want)
		}
	}
}

// startProxy serves the proxy for origin u with cfg on a loopback port,
// over a client of s, until the test ends.
func startProxy(t *testing.T, s *redistest.Server, u *url.URL, cfg config) *httptest.Server {
	t.Helper()
	h, closeCache, err := handler(s.Client(t), u, cfg)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httptest.NewServer(h)
	t.Cleanup(func() {
		proxy.Close()
		closeCache()
	})
	return proxy
}
