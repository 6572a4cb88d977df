package compare

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// big is the metadata (or, for redsync, the value) the lock carries.
var big = strings.Repeat("m", 64<<10)

// TestCompare_release: the commands each lock library sends to release a
// lock on Redis 8.6, and the argument bytes sent to release one that
// carries 64 KiB. Each library first obtains and releases a small lock, so
// probes and script loading are behind it and the steady state is measured.
func TestCompare_release(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	// A locker obtains a lock carrying payload and returns its release.
	type locker func(ctx context.Context, key, payload string) (release func(context.Context) error, err error)
	tests := []struct {
		name      string
		newLocker func(t *testing.T, rc redis.UniversalClient) locker
		wantCmds  string
		check     func(bytes int) bool // on the bytes sent for the 64 KiB release
		wantBytes string
	}{
		{
			name: "stampede",
			newLocker: func(t *testing.T, rc redis.UniversalClient) locker {
				c, err := lock.New(rc, nil)
				if err != nil {
					t.Fatal(err)
				}
				return func(ctx context.Context, key, payload string) (func(context.Context) error, error) {
					l, err := c.Obtain(ctx, key, 10*time.Second, lock.WithMetadata(payload))
					if err != nil {
						return nil, err
					}
					return l.Release, nil
				}
			},
			wantCmds:  "DELEX",
			check:     func(n int) bool { return n < 200 }, // a digest, not the value
			wantBytes: "< 200",
		},
		{
			name: "bsm/redislock",
			newLocker: func(t *testing.T, rc redis.UniversalClient) locker {
				c := redislock.New(rc)
				return func(ctx context.Context, key, payload string) (func(context.Context) error, error) {
					l, err := c.Obtain(ctx, key, 10*time.Second, &redislock.Options{Metadata: payload})
					if err != nil {
						return nil, err
					}
					return l.Release, nil
				}
			},
			wantCmds:  "EVALSHA",
			check:     func(n int) bool { return n > 64<<10 }, // the whole value goes back
			wantBytes: "> 65536",
		},
		{
			name: "redsync",
			newLocker: func(t *testing.T, rc redis.UniversalClient) locker {
				rs := redsync.New(goredis.NewPool(rc))
				return func(ctx context.Context, key, payload string) (func(context.Context) error, error) {
					m := rs.NewMutex(key, redsync.WithTries(1), redsync.WithExpiry(10*time.Second),
						redsync.WithGenValueFunc(func() (string, error) { return "tok-" + payload, nil }))
					if err := m.LockContext(ctx); err != nil {
						return nil, err
					}
					return func(ctx context.Context) error {
						ok, err := m.UnlockContext(ctx)
						if err == nil && !ok {
							err = errors.New("redsync: not unlocked")
						}
						return err
					}, nil
				}
			},
			wantCmds:  "EVALSHA",
			check:     func(n int) bool { return n > 64<<10 },
			wantBytes: "> 65536",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			rec := &recorder{}
			rc := s.Client(t)
			rc.AddHook(rec)
			obtain := tt.newLocker(t, rc)

			warm, err := obtain(ctx, redistest.Key(t, "warm"), "")
			if err != nil {
				t.Fatal(err)
			}
			if err := warm(ctx); err != nil {
				t.Fatal(err)
			}

			release, err := obtain(ctx, redistest.Key(t, "big"), big)
			if err != nil {
				t.Fatal(err)
			}
			rec.start()
			err = release(ctx)
			cmds := rec.stop()
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			bytes := 0
			for _, c := range cmds {
				names = append(names, c.name)
				bytes += c.bytes
			}
			got := strings.Join(names, " ")
			result(t, "release on Redis 8.6", tt.name, "commands", got)
			result(t, "release of a lock carrying 64 KiB", tt.name, "bytes", bytes)
			if got != tt.wantCmds {
				t.Errorf("release sent %q, want %q", got, tt.wantCmds)
			}
			if !tt.check(bytes) {
				t.Errorf("release sent %d argument bytes, want %s", bytes, tt.wantBytes)
			}
		})
	}
}

// TestCompare_keepAlive states what stampede's lock does while work runs:
// Do keeps the lock alive and cancels the work with ErrLost when the key
// is deleted under it, and fencing numbers grow with every acquisition.
// It makes no claim about the other libraries.
func TestCompare_keepAlive(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	rc := s.Client(t)
	c, err := lock.New(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		run  func(t *testing.T, ctx context.Context, key string) string
	}{
		{
			name: "Do outlives its TTL, then loses the deleted key",
			run: func(t *testing.T, ctx context.Context, key string) string {
				const ttl = 300 * time.Millisecond
				started := make(chan struct{})
				errs := make(chan error, 1)
				go func() {
					errs <- c.Do(ctx, key, ttl, func(work context.Context) error {
						close(started)
						<-work.Done()
						return context.Cause(work)
					}, lock.WithRefreshEvery(50*time.Millisecond))
				}()
				select {
				case <-started:
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				}
				// Outlive the TTL three times over: the key must still be held.
				outlive := time.NewTimer(3 * ttl)
				select {
				case <-outlive.C:
				case err := <-errs:
					t.Fatalf("Do returned %v before the key was deleted", err)
				}
				if n, err := rc.Exists(ctx, key).Result(); err != nil || n != 1 {
					t.Fatalf("after 3×TTL the lock key exists = %d (%v), want 1", n, err)
				}
				deleted := time.Now()
				if err := rc.Del(ctx, key).Err(); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-errs:
					if !errors.Is(err, lock.ErrLost) {
						t.Fatalf("Do = %v, want ErrLost", err)
					}
					return fmt.Sprintf("kept alive past 3×TTL; ErrLost %v after DEL", time.Since(deleted).Round(10*time.Millisecond))
				case <-ctx.Done():
					t.Fatal("work not cancelled after the key was deleted")
				}
				return ""
			},
		},
		{
			name: "fencing numbers grow",
			run: func(t *testing.T, ctx context.Context, key string) string {
				var fences []int64
				for range 3 {
					l, err := c.Obtain(ctx, key, 10*time.Second, lock.WithFencing())
					if err != nil {
						t.Fatal(err)
					}
					fences = append(fences, l.Fence())
					if err := l.Release(ctx); err != nil {
						t.Fatal(err)
					}
				}
				for i := 1; i < len(fences); i++ {
					if fences[i] <= fences[i-1] {
						t.Fatalf("fences %v do not grow", fences)
					}
				}
				return fmt.Sprintf("fences %v", fences)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			result(t, "keep-alive and fencing", "stampede", tt.name, tt.run(t, ctx, redistest.Key(t, "k")))
		})
	}
}
