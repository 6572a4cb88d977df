package cache_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// captureDefault makes slog.Default() log to a new logSink until the test
// ends: what a Cache without a Logger says goes there.
func captureDefault(tb testing.TB) *logSink {
	tb.Helper()
	old := slog.Default()
	logs := newLogSink()
	slog.SetDefault(slog.New(logs))
	tb.Cleanup(func() { slog.SetDefault(old) })
	return logs
}

// TestFailOpen_said: a Cache running without its server says so, once per
// cause and cool-down, with no Logger configured too (slog.Default): at a
// port where an HTTP server answers (the loader ran on every call and
// nothing was said), and at a port where nothing listens. A server
// answering BUSY fails the calls (a reply is not a reason to load without
// the cache), said once too.
func TestFailOpen_said(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) (rc redis.UniversalClient, done func())
		want  string // in the one warning
		open  bool   // the calls fail open (else they fail)
	}{
		{"not a Redis server", func(t *testing.T) (redis.UniversalClient, func()) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			t.Cleanup(srv.Close)
			rc := redis.NewClient(&redis.Options{Addr: srv.Listener.Addr().String()})
			t.Cleanup(func() { _ = rc.Close() })
			return rc, func() {}
		}, "Redis protocol", true},
		{"nothing listens", func(t *testing.T) (redis.UniversalClient, func()) {
			s := redistest.Start(t, redistest.Redis8)
			rc := s.Client(t)
			s.Kill()
			return rc, func() {}
		}, "unreachable", true},
		{"BUSY", func(t *testing.T) (redis.UniversalClient, func()) {
			s := redistest.Start(t, redistest.Redis8) // made busy: not shared
			rc := s.Client(t)
			return rc, redistest.Busy(t, s.Addrs()[0])
		}, "BUSY", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			rc, done := tc.start(t)
			defer done()
			logs := captureDefault(t)
			c, err := cache.New(rc, &cache.Options{Namespace: namespace(t), TTL: time.Minute, FailOpenCooldown: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			var loads atomic.Int64
			for i := range 5 {
				v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) { loads.Add(1); return "v", nil })
				if tc.open && (err != nil || v != "v") {
					t.Fatalf("call %d: GetOrLoad = %q, %v; want the loader's value (fail open)", i, v, err)
				}
				if !tc.open && err == nil {
					t.Fatalf("call %d: GetOrLoad = %q; want the server's reply", i, v)
				}
			}
			if n := loads.Load(); tc.open && n != 5 {
				t.Fatalf("%d loads in 5 calls without a server, want 5", n)
			}
			var said []string
			for _, m := range logs.all() {
				if strings.HasPrefix(m, "WARN") && strings.Contains(m, tc.want) {
					said = append(said, m)
				}
			}
			if len(said) != 1 {
				t.Errorf("%d warnings naming %q, want 1 (once per cause and cool-down); logged: %q", len(said), tc.want, logs.all())
			}
		})
	}
}
