package stampedeotel

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// namedError names its own error.type, as the semantic conventions let an
// error do.
type namedError struct{}

func (namedError) Error() string     { return "named" }
func (namedError) ErrorType() string { return "my_failure" }

type valueError struct{ n int }

func (e valueError) Error() string { return fmt.Sprint("value ", e.n) }

func TestErrorTypes_of(t *testing.T) {
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"panic", fmt.Errorf("cache: load %q: %w", "k", &loader.PanicError{Value: "boom"}), "panic"},
		{"wait timeout", fmt.Errorf("%w (key %q)", cache.ErrWaitTimeout, "k"), "timeout"},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), "timeout"},
		{"canceled", errors.Join(lock.ErrNotObtained, context.Canceled), "canceled"},
		{"remote load", fmt.Errorf("%w: key %q: boom", cache.ErrRemoteLoad, "k"), "remote_load"},
		{"permission", fmt.Errorf("x: %w", cache.ErrPermission), "permission"},
		{"too large", fmt.Errorf("%w: 10 bytes", cache.ErrValueTooLarge), "value_too_large"},
		{"lost", lock.ErrLost, "lost"},
		{"own name", fmt.Errorf("x: %w", namedError{}), "my_failure"},
		{"a type with a cause of its own", fmt.Errorf("lock: obtain: %w", opErr), "*net.OpError"},
		{"joined", errors.Join(valueError{1}, opErr), "stampedeotel.valueError"},
		{"several %w", fmt.Errorf("%w and %w", opErr, valueError{2}), "*net.OpError"},
		{"errors.New", errors.New("boom"), "*errors.errorString"},
		{"server reply", fmt.Errorf("x: %w", redis.Nil), "proto.RedisError"},
		{"nil", nil, "_OTHER"},
	}
	var et errorTypes
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := et.of(tt.err); got != tt.want {
				t.Errorf("error.type of %v = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

// Past maxErrorTypes names besides the known ones, the others are _OTHER;
// the names given before stay.
func TestErrorTypes_bounded(t *testing.T) {
	var et errorTypes
	first := et.bounded("first")
	for i := range maxErrorTypes + 10 {
		et.bounded(fmt.Sprint("type", i))
	}
	if got := et.bounded("later"); got != otherErrorType {
		t.Errorf("a name past the bound is %q, want %q", got, otherErrorType)
	}
	if got := et.bounded("first"); got != first || first != "first" {
		t.Errorf("a name given first is %q now, %q then; want it kept", got, first)
	}
	if got := et.of(context.Canceled); got != "canceled" {
		t.Errorf("a known condition past the bound is %q, want canceled", got)
	}
	if n := len(et.names); n != maxErrorTypes {
		t.Errorf("%d names kept, want %d", n, maxErrorTypes)
	}
}
