package baselines

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/toolkit/embedded"
	"github.com/redis/go-redis/v9"
)

func server(tb testing.TB) *redis.Client {
	tb.Helper()
	s, err := embedded.Start()
	if err != nil {
		tb.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	tb.Cleanup(func() { _ = rdb.Close(); s.Close() })
	return rdb
}

type getter interface {
	Get(ctx context.Context, key string, load Loader[string]) (string, error)
}

// TestBaselines: n concurrent callers of one absent key, with a loader
// that is released only once every caller has started. Each baseline
// loads as often as its design says: every caller, once per process, once.
func TestBaselines(t *testing.T) {
	rdb := server(t)
	const n = 16
	tests := []struct {
		name      string
		g         getter
		wantLoads int64
	}{
		{"naive", &Naive[string]{RDB: rdb, TTL: time.Minute}, n},
		{"singleflight", &Singleflight[string]{Naive: Naive[string]{RDB: rdb, TTL: time.Minute}}, 1},
		{"lock-poll", NewLockPoll[string](rdb, time.Minute, 5*time.Second, 5*time.Millisecond, 10*time.Second), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			key := "baselines:" + tt.name
			var loads atomic.Int64
			var started sync.WaitGroup
			started.Add(n)
			release := make(chan struct{})
			load := func(ctx context.Context) (string, error) {
				loads.Add(1)
				select {
				case <-release:
				case <-ctx.Done():
					return "", ctx.Err()
				}
				return "value", nil
			}
			errs := make(chan error, n)
			got := make(chan string, n)
			for range n {
				go func() {
					started.Done()
					v, err := tt.g.Get(ctx, key, load)
					got <- v
					errs <- err
				}()
			}
			started.Wait()
			// Every naive caller must be inside its load before release;
			// the others have at most one load to wait for.
			for loads.Load() < tt.wantLoads {
				select {
				case <-ctx.Done():
					t.Fatalf("%d loads started, want %d", loads.Load(), tt.wantLoads)
				case <-time.After(time.Millisecond):
				}
			}
			close(release)
			for range n {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
				if v := <-got; v != "value" {
					t.Fatalf("got %q", v)
				}
			}
			if got := loads.Load(); got != tt.wantLoads {
				t.Errorf("%d loads, want %d", got, tt.wantLoads)
			}
			// Now it is cached: no further load.
			if _, err := tt.g.Get(ctx, key, load); err != nil || loads.Load() != tt.wantLoads {
				t.Errorf("a hit loaded (%d loads) or failed: %v", loads.Load(), err)
			}
			if n, err := rdb.Exists(ctx, key+":lock").Result(); err != nil || n != 0 {
				t.Errorf("lock key left behind: %d %v", n, err)
			}
		})
	}
}
