package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
)

// TestOption_calls: each option is an option of exactly the calls it
// applies to, also when its dynamic type is asserted (the static types
// keep one from compiling where it does not apply: see the package doc,
// "Per-call options").
func TestOption_calls(t *testing.T) {
	tests := []struct {
		name                string
		opt                 any
		obtain, do, runOnce bool
	}{
		{"WithRetry", lock.WithRetry(lock.LinearBackoff(time.Millisecond)), true, true, false},
		{"WithMaxWait", lock.WithMaxWait(time.Second), true, true, false},
		{"WithMetadata", lock.WithMetadata("m"), true, true, true},
		{"WithFencing", lock.WithFencing(), true, true, true},
		{"WithRefreshEvery", lock.WithRefreshEvery(time.Second), false, true, false},
		{"WithMinHold", lock.WithMinHold(time.Second), false, false, true},
	}
	for _, tt := range tests {
		_, obtain := tt.opt.(lock.ObtainOption)
		_, do := tt.opt.(lock.DoOption)
		_, runOnce := tt.opt.(lock.RunOnceOption)
		if obtain != tt.obtain || do != tt.do || runOnce != tt.runOnce {
			t.Errorf("%s: option of Obtain %t, Do %t, RunOnce %t; want %t, %t, %t",
				tt.name, obtain, do, runOnce, tt.obtain, tt.do, tt.runOnce)
		}
	}
}

// TestOption_nil: a nil option is skipped, so the spelling of the former
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
