package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
)

// TestOption_notApplying: an Option given to a call it does not apply to is
// refused before any server call, naming the option and the call.
func TestOption_notApplying(t *testing.T) {
	// Nothing listens on this address: any server call would fail with a
	// connection error rather than ErrInvalid.
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer rc.Close()
	c, err := lock.New(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	nop := func(context.Context) error { return nil }
	obtain := func(opts ...lock.Option) func() error {
		return func() error { _, err := c.Obtain(ctx, "k", time.Second, opts...); return err }
	}
	do := func(opts ...lock.Option) func() error {
		return func() error { return c.Do(ctx, "k", time.Second, nop, opts...) }
	}
	runOnce := func(opts ...lock.Option) func() error {
		return func() error { _, err := c.RunOnce(ctx, "k", time.Second, nop, opts...); return err }
	}
	retry := lock.WithRetry(lock.LinearBackoff(time.Millisecond))
	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"Obtain WithRefreshEvery", obtain(lock.WithRefreshEvery(time.Millisecond)), "WithRefreshEvery applies to Do, not Obtain"},
		{"Obtain WithMinHold", obtain(retry, lock.WithMinHold(time.Millisecond)), "WithMinHold applies to RunOnce, not Obtain"},
		{"Do WithMinHold", do(lock.WithMinHold(0)), "WithMinHold applies to RunOnce, not Do"},
		{"RunOnce WithRetry", runOnce(retry), "WithRetry applies to Obtain and Do, not RunOnce"},
		{"RunOnce WithRetry nil", runOnce(lock.WithRetry(nil)), "WithRetry applies to Obtain and Do, not RunOnce"},
		{"RunOnce WithMaxWait", runOnce(lock.WithMaxWait(time.Second)), "WithMaxWait applies to Obtain and Do, not RunOnce"},
		{"RunOnce WithRefreshEvery", runOnce(lock.WithRefreshEvery(time.Millisecond)), "WithRefreshEvery applies to Do, not RunOnce"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if want := "lock: invalid argument: " + tt.want; !errors.Is(err, lock.ErrInvalid) || err.Error() != want {
				t.Fatalf("err = %v, want %q wrapping ErrInvalid", err, want)
			}
		})
	}
}

// TestOption_nil: a nil Option is skipped, so the spelling of the former
// pointer options, Obtain(ctx, key, ttl, nil), still means all defaults.
func TestOption_nil(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	c, _ := newClient(t, s, nil)
	key := redistest.Key(t, "k")

	l, err := c.Obtain(ctx, key, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.Metadata() != "" || l.Fence() != 0 {
		t.Errorf("lock with nil option: metadata %q, fence %d; want none", l.Metadata(), l.Fence())
	}
	start := time.Now()
	if _, err := c.Obtain(ctx, key, time.Minute, nil); !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("second Obtain = %v, want ErrNotObtained", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("second Obtain took %v: a nil option must not wait", d)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	l, err = c.Obtain(ctx, key, time.Minute, nil, lock.WithMetadata("m"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.Metadata() != "m" {
		t.Errorf("metadata %q beside nil options, want %q", l.Metadata(), "m")
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	ran := false
	if err := c.Do(ctx, key, time.Minute, func(context.Context) error { ran = true; return nil }, nil); err != nil || !ran {
		t.Errorf("Do with a nil option: ran %t, %v", ran, err)
	}
	if ok, err := c.RunOnce(ctx, key, time.Minute, func(context.Context) error { return nil }, nil); err != nil || !ok {
		t.Errorf("RunOnce with a nil option: ran %t, %v", ok, err)
	}
}
