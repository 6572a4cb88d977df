package redisx_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/internal/testkit/faultproxy"
	"github.com/hotkv/stampede/internal/testkit/redistest"
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

func TestIsRefused(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis7)
	rc := s.Client(t)
	ctx := context.Background()
	unknown := rc.Do(ctx, "DELEX", "k", "IFEQ", "v").Err()
	syntax := rc.Do(ctx, "SET", "k", "v", "IFEQ", "v").Err()
	nilErr := rc.Get(ctx, redistest.Key(t, "missing")).Err()
	if !redisx.IsUnknownCommand(unknown) || !redisx.IsRefused(unknown) {
		t.Errorf("DELEX on Redis 7: %v not seen as unknown command", unknown)
	}
	if redisx.IsUnknownCommand(syntax) || !redisx.IsRefused(syntax) {
		t.Errorf("SET IFEQ on Redis 7: %v not seen as refused", syntax)
	}
	if !redisx.IsNil(nilErr) || redisx.IsReply(nilErr) || redisx.IsRefused(nilErr) {
		t.Errorf("GET of a missing key: %v misclassified", nilErr)
	}
}

func TestIsTransport(t *testing.T) {
	s := redistest.Start(t, redistest.Redis7)
	rc := s.Client(t)
	ctx := context.Background()
	reply := rc.Do(ctx, "NOSUCHCOMMAND").Err()
	s.Kill()
	down := rc.Ping(ctx).Err()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"server down", down, true},
		{"error reply", reply, false},
		{"nil reply", redisx.IsNilErrForTest(), false},
		{"cancelled", rc.Ping(cctx).Err(), false},
		{"client mistake", fmt.Errorf("ttl below 1ms"), false},
	}
	for _, tt := range tests {
		if got := redisx.IsTransport(tt.err); got != tt.want {
			t.Errorf("%s: IsTransport(%v) = %t, want %t", tt.name, tt.err, got, tt.want)
		}
	}
}

func TestInvalid(t *testing.T) {
	err := redisx.Invalid("cache", "Expiry.Stale %v is negative", -time.Second)
	if got, want := err.Error(), "cache: Expiry.Stale -1s is negative"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(err, redisx.ErrInvalid) {
		t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
	}
	if errors.Is(err, redisx.ErrPermission) {
		t.Errorf("errors.Is(%v, ErrPermission) = true", err)
	}
}
