package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
)

// workerCron runs the job once with RunOnce and prints "ran" or "skipped".
func workerCron() int {
	c := workerClient()
	ran, err := c.RunOnce(context.Background(), workerEnv("KEY"), time.Minute, func(context.Context) error {
		return nil // a fast job: only MinHold keeps a late instance out
	}, lock.WithMinHold(20*time.Second), lock.WithMetadata(workerEnv("NAME")))
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	if ran {
		fmt.Println("ran")
	} else {
		fmt.Println("skipped")
	}
	return 0
}

func TestClient_RunOnce_processes(t *testing.T) {
	const procs = 4
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		key := redistest.Key(t, "cron")
		var ps []*redistest.Proc
		for i := range procs {
			ps = append(ps, redistest.Spawn(t, s, "cron", "LOCKTEST_KEY="+key, fmt.Sprintf("LOCKTEST_NAME=instance-%d", i)))
		}
		ran := 0
		for i, p := range ps {
			out, err := p.Wait(ctx)
			if err != nil {
				t.Fatalf("worker %d: %v", i, err)
			}
			switch strings.TrimSpace(out) {
			case "ran":
				ran++
			case "skipped":
			default:
				t.Fatalf("worker %d said %q", i, out)
			}
		}
		if ran != 1 {
			t.Errorf("%d instances ran the job, want exactly 1", ran)
		}
		// The fast job ended long ago, but MinHold keeps the tick claimed.
		c, _ := newClient(t, s, nil)
		info, err := c.Inspect(ctx, key)
		if err != nil || !strings.HasPrefix(info.Metadata, "instance-") || info.TTL < 10*time.Second {
			t.Errorf("after the job: Inspect = %+v, %v; want held for the rest of MinHold", info, err)
		}
	})
}

func TestClient_RunOnce_releasesWithoutMinHold(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	c, _ := newClient(t, s, nil)
	key := redistest.Key(t, "cron")
	calls := 0
	for range 2 {
		ran, err := c.RunOnce(ctx, key, time.Minute, func(context.Context) error { calls++; return nil })
		if err != nil || !ran {
			t.Fatalf("RunOnce = %t, %v; want it to run", ran, err)
		}
	}
	if calls != 2 {
		t.Errorf("job ran %d times, want 2 (the lock is released after each run)", calls)
	}
}

func TestClient_RunOnce_maxHoldCancels(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	c, _ := newClient(t, s, nil)
	var cause error
	ran, err := c.RunOnce(ctx, redistest.Key(t, "cron"), 100*time.Millisecond, func(ctx context.Context) error {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	})
	if !ran || !errors.Is(cause, lock.ErrLost) || !errors.Is(err, lock.ErrLost) {
		t.Errorf("RunOnce = %t, %v with cause %v; want the job cancelled with ErrLost", ran, err, cause)
	}
}

// Issue 10, defect 15: a cancelled or expired context is the caller's own
// doing, not "another instance ran it": RunOnce, like Obtain and Do,
// returns errors.Join(ErrNotObtained, ctx.Err()), runs nothing and leaves
// no lock.
func TestClient_RunOnce_cancelled(t *testing.T) {
	cancelled := func(*testing.T) (context.Context, error) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx, context.Canceled
	}
	expired := func(t *testing.T) (context.Context, error) {
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		t.Cleanup(cancel)
		return ctx, context.DeadlineExceeded
	}
	calls := []struct {
		name string
		call func(ctx context.Context, c *lock.Client, key string, fn func(context.Context) error) error
	}{
		{"RunOnce", func(ctx context.Context, c *lock.Client, key string, fn func(context.Context) error) error {
			ran, err := c.RunOnce(ctx, key, time.Minute, fn)
			if ran {
				return fmt.Errorf("ran = true (err %v)", err)
			}
			return err
		}},
		{"RunOnce fenced", func(ctx context.Context, c *lock.Client, key string, fn func(context.Context) error) error {
			ran, err := c.RunOnce(ctx, key, time.Minute, fn, lock.WithFencing())
			if ran {
				return fmt.Errorf("ran = true (err %v)", err)
			}
			return err
		}},
		{"Do", func(ctx context.Context, c *lock.Client, key string, fn func(context.Context) error) error {
			return c.Do(ctx, key, time.Minute, fn)
		}},
		{"Obtain", func(ctx context.Context, c *lock.Client, key string, fn func(context.Context) error) error {
			l, err := c.Obtain(ctx, key, time.Minute)
			if l != nil {
				return fmt.Errorf("obtained %v (err %v)", l.Key(), err)
			}
			return err
		}},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		c, _ := newClient(t, s, nil)
		for _, mk := range []struct {
			name string
			ctx  func(*testing.T) (context.Context, error)
		}{{"cancelled", cancelled}, {"expired", expired}} {
			for _, tc := range calls {
				t.Run(mk.name+"/"+tc.name, func(t *testing.T) {
					key := "{" + redistest.Key(t, "job") + "}"
					ctx, want := mk.ctx(t)
					ran := false
					err := tc.call(ctx, c, key, func(context.Context) error { ran = true; return nil })
					if ran || !errors.Is(err, want) || !errors.Is(err, lock.ErrNotObtained) {
						t.Errorf("ran = %t, err = %v; want nothing run and errors.Join(ErrNotObtained, %v)", ran, err, want)
					}
					if _, err := c.Inspect(testCtx(t), key); !errors.Is(err, lock.ErrNotHeld) {
						t.Errorf("Inspect after = %v; want ErrNotHeld (no lock left behind)", err)
					}
				})
			}
		}
	}, redistest.Redis8, redistest.Cluster, redistest.Miniredis)
}

// The control for TestClient_RunOnce_cancelled: a lock held by another
// instance, with the caller's context alive, is still (false, nil).
func TestClient_RunOnce_heldElsewhere(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	c, _ := newClient(t, s, nil)
	key := redistest.Key(t, "job")
	other, err := c.Obtain(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	ran, err := c.RunOnce(ctx, key, time.Minute, func(context.Context) error { return nil })
	if ran || err != nil {
		t.Errorf("RunOnce = %t, %v; want false, nil while another instance holds the lock", ran, err)
	}
}
