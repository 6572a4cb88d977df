package embedded_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/toolkit/embedded"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Keys expire by the wall clock, as on a real server; miniredis alone
// would keep them until told to fast-forward.
func TestServer_expiresInRealTime(t *testing.T) {
	s, err := embedded.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := rc.Set(ctx, "k", "v", 50*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := rc.Exists(ctx, "k").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatal("a key with a 50ms TTL still exists after 10s")
		}
	}
}

// Kill drops the clients' connections and Restart brings the server back
// on the same address with its data.
func TestServer_killRestartKeepsData(t *testing.T) {
	s, err := embedded.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rc := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer rc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := rc.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := rc.Get(ctx, "k").Err(); err == nil {
		t.Fatal("GET on a killed server succeeded")
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if v, err := rc.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Fatalf("after Restart: %q, %v; want the data kept", v, err)
	}
}

func TestOpen(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		t.Setenv("REDIS_URL", "")
		rc, url, closeAll, err := embedded.Open(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer closeAll()
		if !strings.HasPrefix(url, "redis://127.0.0.1:") {
			t.Errorf("url %q, want a loopback redis:// URL", url)
		}
		if err := rc.Ping(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("bad REDIS_URL", func(t *testing.T) {
		t.Setenv("REDIS_URL", "http://example.invalid")
		_, _, _, err := embedded.Open(t.Context())
		if err == nil || !strings.Contains(err.Error(), "REDIS_URL") {
			t.Fatalf("err = %v, want one naming REDIS_URL", err)
		}
	})
	t.Run("REDIS_URL of a dead server", func(t *testing.T) {
		s, err := embedded.Start()
		if err != nil {
			t.Fatal(err)
		}
		addr := s.Addr()
		s.Close()
		t.Setenv("REDIS_URL", "redis://"+addr)
		_, _, _, err = embedded.Open(t.Context())
		if err == nil || !strings.Contains(err.Error(), "server redis://"+addr) {
			t.Fatalf("err = %v, want one naming the server", err)
		}
	})
	t.Run("REDIS_URL", func(t *testing.T) {
		s, err := embedded.Start()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		t.Setenv("REDIS_URL", "redis://"+s.Addr())
		rc, url, closeAll, err := embedded.Open(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		defer closeAll()
		if url != "redis://"+s.Addr() {
			t.Errorf("url %q, want REDIS_URL's", url)
		}
		if err := rc.Set(t.Context(), "via-url", "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		direct := redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer direct.Close()
		if v, err := direct.Get(t.Context(), "via-url").Result(); err != nil || v != "1" {
			t.Fatalf("the server REDIS_URL names holds %q, %v", v, err)
		}
	})
}

// A password in REDIS_URL is never printed: not by Redacted, not in
// Open's error when the server cannot be reached.
func TestRedacted_password(t *testing.T) {
	tests := []struct{ name, raw, want string }{
		{"password", "redis://:s3cret@127.0.0.1:6379/0", "redis://:xxxxx@127.0.0.1:6379/0"},
		{"user and password", "rediss://app:s3cret@cache.internal:6380", "rediss://app:xxxxx@cache.internal:6380"},
		{"no password", "redis://127.0.0.1:6379", "redis://127.0.0.1:6379"},
		{"does not parse", "redis://:s3cret@[::1", "(a URL that does not parse)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := embedded.Redacted(tt.raw); got != tt.want {
				t.Errorf("Redacted(%q) = %q, want %q", tt.raw, got, tt.want)
			}
		})
	}
	for _, raw := range []string{"redis://:s3cret@127.0.0.1:1/0", "redis://:s3cret@[::1", "http://:s3cret@127.0.0.1:1"} {
		t.Setenv("REDIS_URL", raw)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, _, _, err := embedded.Open(ctx)
		cancel()
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open with REDIS_URL %q: error %v; want one without the password", raw, err)
		}
	}
}
