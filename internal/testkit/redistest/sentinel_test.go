package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// A Sentinel group fails over on request and when its master hangs, and
// the failover client follows.
func TestSentinel_failover(t *testing.T) {
	for _, k := range []redistest.Kind{redistest.Redis8, redistest.Valkey} {
		for _, hang := range []bool{false, true} {
			name := string(k) + "/graceful"
			if hang {
				name = string(k) + "/paused-then-killed"
			}
			t.Run(name, func(t *testing.T) {
				s := redistest.StartSentinel(t, k)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				c := s.Client(t)
				if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
					t.Fatal(err)
				}
				from, err := s.Master(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if from != s.Addrs()[0] {
					t.Fatalf("master %s; want %s", from, s.Addrs()[0])
				}
				if hang {
					if err := s.Pause(from); err != nil {
						t.Fatal(err)
					}
					if _, err := s.WaitSwitch(ctx, from); err != nil {
						t.Fatal(err)
					}
					if err := s.Kill(from); err != nil {
						t.Fatal(err)
					}
				} else if _, _, err := s.Failover(ctx); err != nil {
					t.Fatal(err)
				}
				if err := c.Set(ctx, "k", "v2", 0).Err(); err != nil {
					t.Fatal(err)
				}
				if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v2" {
					t.Fatalf("Get = %q, %v; want v2", v, err)
				}
			})
		}
	}
}

// A replica cut off by Lag lacks the master's later writes, and is
// promoted without them when the master hangs.
func TestSentinel_lag(t *testing.T) {
	for _, k := range []redistest.Kind{redistest.Redis8, redistest.Valkey} {
		t.Run(string(k), func(t *testing.T) {
			s := redistest.StartSentinel(t, k)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c := s.Client(t)
			if err := c.Set(ctx, "k", "v1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if n, err := c.Wait(ctx, 1, 10*time.Second).Result(); err != nil || n != 1 {
				t.Fatalf("WAIT = %d, %v; want the replica's acknowledgement", n, err)
			}
			from, err := s.Master(ctx)
			if err != nil {
				t.Fatal(err)
			}
			replica, err := s.Lag(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Set(ctx, "k", "v2", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if n, err := c.Wait(ctx, 1, 300*time.Millisecond).Result(); err != nil || n != 0 {
				t.Fatalf("WAIT = %d, %v; want no acknowledgement from the lagging replica", n, err)
			}
			if err := s.Pause(from); err != nil {
				t.Fatal(err)
			}
			to, err := s.WaitSwitch(ctx, from)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Kill(from); err != nil {
				t.Fatal(err)
			}
			if to != replica {
				t.Fatalf("promoted %s; want the replica %s", to, replica)
			}
			if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v1" {
				t.Fatalf("Get after the failover = %q, %v; want v1 (v2 lost with the old master)", v, err)
			}
		})
	}
}
