package loader_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hotkv/stampede/loader"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWithRetry(t *testing.T) {
	transient := errors.New("transient")
	tests := []struct {
		name      string
		errs      []error // returned by successive calls; nil = success
		opts      *loader.RetryOptions
		wantCalls int
		wantErr   error
	}{
		{"succeeds after transient errors", []error{transient, transient, nil}, nil, 3, nil},
		{"gives up after attempts", []error{transient, transient, transient, nil}, nil, 3, transient},
		{"not found is final", []error{loader.ErrNotFound, nil}, nil, 1, loader.ErrNotFound},
		{"wrapped not found is final", []error{fmt.Errorf("row: %w", loader.ErrNotFound), nil}, nil, 1, loader.ErrNotFound},
		{"retryable says no", []error{transient, nil}, &loader.RetryOptions{Retryable: func(error) bool { return false }}, 1, transient},
		{"more attempts", []error{transient, transient, transient, transient, nil}, &loader.RetryOptions{Attempts: 5, Backoff: time.Millisecond}, 5, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			fn := loader.WithRetry(func(context.Context) (int, error) {
				err := tt.errs[calls]
				calls++
				if err != nil {
					return 0, err
				}
				return 7, nil
			}, tt.opts)
			v, err := fn(context.Background())
			if calls != tt.wantCalls || !errors.Is(err, tt.wantErr) || (err == nil && v != 7) {
				t.Errorf("got %d, %v after %d calls; want error %v after %d", v, err, calls, tt.wantErr, tt.wantCalls)
			}
		})
	}
}

func TestWithRetry_contextEndsWait(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	fn := loader.WithRetry(func(context.Context) (int, error) {
		cancel() // the caller gives up while the loader fails
		return 0, errors.New("transient")
	}, &loader.RetryOptions{Backoff: time.Hour})
	if _, err := fn(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

// A *PanicError (what cache.GetOrLoad makes of a panicking loader) is not
// retried, and unwraps to the panic value when that is an error.
func TestWithRetry_panicError(t *testing.T) {
	boom := errors.New("boom")
	calls := 0
	fn := loader.WithRetry(func(context.Context) (int, error) {
		calls++
		return 0, &loader.PanicError{Value: boom, Stack: []byte("stack")}
	}, &loader.RetryOptions{Backoff: time.Millisecond})
	_, err := fn(context.Background())
	var pe *loader.PanicError
	if !errors.As(err, &pe) || pe.Value != boom || !errors.Is(err, boom) || calls != 1 {
		t.Errorf("err = %v after %d calls, want the *PanicError unwrapping to boom after 1", err, calls)
	}
}

func TestWithTimeout(t *testing.T) {
	fn := loader.WithTimeout(func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, ctx.Err()
	}, time.Millisecond)
	if _, err := fn(context.Background()); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want DeadlineExceeded", err)
	}
}

// TestPanicError_Error: the message is one line, whatever the panic value
// holds, so a log line stays one line; the stack stays in the value.
func TestPanicError_Error(t *testing.T) {
	tests := []struct {
		name  string
		value any
		want  string
	}{
		{"string", "boom", "loader: panic: boom"},
		{"error", errors.New("boom"), "loader: panic: boom"},
		{"newlines", "line 1\nline 2\r\n", `loader: panic: line 1\nline 2\r\n`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &loader.PanicError{Value: tc.value, Stack: []byte("goroutine 1 [running]:\nmain.main()\n")}
			if got := p.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
			if string(p.Stack) == "" {
				t.Error("the stack is gone")
			}
		})
	}
}
