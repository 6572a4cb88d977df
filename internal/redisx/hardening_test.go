package redisx_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/faultproxy"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// TestIsTransport_contextIsNotServer (issue 10, #12): a caller's own
// cancellation or deadline is not a transport failure, although
// context.DeadlineExceeded satisfies net.Error; a connection's read
// timeout is one.
func TestIsTransport_contextIsNotServer(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	p, err := faultproxy.Start(s.Addrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	rc := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ReadTimeout: 50 * time.Millisecond})
	t.Cleanup(func() { _ = rc.Close() })
	ctx := context.Background()
	if err := rc.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.SetLatency(time.Second)
	readTimeout := rc.Get(ctx, redistest.Key(t, "k")).Err()
	p.Resume()

	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"read timeout", readTimeout, true},
		{"deadline exceeded", context.DeadlineExceeded, false},
		{"wrapped deadline exceeded", fmt.Errorf("cache: get: %w", context.DeadlineExceeded), false},
		{"canceled", fmt.Errorf("x: %w", context.Canceled), false},
	}
	for _, tt := range tests {
		if got := redisx.IsTransport(tt.err); got != tt.want {
			t.Errorf("%s: IsTransport(%v) = %t, want %t", tt.name, tt.err, got, tt.want)
		}
	}
}

// deadlineOnly is a context whose deadline has passed before its Err says
// so, as a timerCtx is for a moment.
type deadlineOnly struct {
	context.Context
	dl time.Time
}

func (d deadlineOnly) Deadline() (time.Time, bool) { return d.dl, true }

func TestCallerDone(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		want bool
	}{
		{"no deadline", context.Background(), false},
		{"deadline ahead", deadlineOnly{context.Background(), time.Now().Add(time.Hour)}, false},
		{"deadline passed, Err not yet set", deadlineOnly{context.Background(), time.Now().Add(-time.Millisecond)}, true},
		{"cancelled", cancelled, true},
	}
	for _, tt := range tests {
		if got := redisx.CallerDone(tt.ctx); got != tt.want {
			t.Errorf("%s: CallerDone = %t, want %t", tt.name, got, tt.want)
		}
	}
}

// TestTag_sha256 (issue 10, #10): keys that are hashed (long, with braces,
// spaces or bytes that are not printable, or starting with "#") are
// reduced to the SHA-256 of the whole key, not to a fast hash whose
// collisions an attacker could craft; distinct keys get distinct tags, and
// no hashed tag equals a plain key.
func TestTag_sha256(t *testing.T) {
	long := strings.Repeat("k", redisx.MaxPlainKey+1)
	keys := []string{
		long, long + "x", "GET http://a.example/?q=1", "GET http://a.example/?q=2", "a{b}", "a}b", "\x00", "\x00\x00",
		"#", "#plain", "ünïcödé", "a b", "a\tb", "a\nb",
	}
	seen := map[string]string{}
	for _, k := range keys {
		got := redisx.Tag(k)
		sum := sha256.Sum256([]byte(k))
		if want := "#" + hex.EncodeToString(sum[:]); got != want {
			t.Errorf("Tag(%q) = %q, want %q", k, got, want)
		}
		if other, ok := seen[got]; ok {
			t.Errorf("Tag(%q) = Tag(%q) = %q", k, other, got)
		}
		seen[got] = k
		if redisx.Tag(got) == got {
			t.Errorf("the tag %q is kept as a plain key: a user key could take a hashed key's place", got)
		}
	}
}
