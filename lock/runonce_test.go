package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/lock"
)

// workerCron runs the job once with RunOnce and prints "ran" or "skipped".
func workerCron() int {
	c := workerClient()
	ran, err := c.RunOnce(context.Background(), workerEnv("KEY"), time.Minute, func(context.Context) error {
		return nil // a fast job: only MinHold keeps a late instance out
	}, &lock.RunOnceOptions{MinHold: 20 * time.Second, Metadata: workerEnv("NAME")})
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
		ran, err := c.RunOnce(ctx, key, time.Minute, func(context.Context) error { calls++; return nil }, nil)
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
	}, nil)
	if !ran || !errors.Is(cause, lock.ErrLost) || !errors.Is(err, lock.ErrLost) {
		t.Errorf("RunOnce = %t, %v with cause %v; want the job cancelled with ErrLost", ran, err, cause)
	}
}
