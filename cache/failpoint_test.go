package cache_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/failpoint"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// The failpoints of the claim protocol (internal/failpoint), as the
// robustness suite uses them. The hook is process-wide: these tests do not
// run in parallel, and tell their own calls from the other tests' by a
// context value, which the flights' and writes' contexts keep.

// callKey marks the context of a call whose failpoints a test follows.
type callKey struct{}

// pointLog records the failpoints that calls marked with callKey reach,
// by the call's mark.
type pointLog struct {
	mu     sync.Mutex
	points map[string][]string
}

// follow enables a hook that records into a new pointLog, then calls
// also, if set, for the points of marked calls; the hook is disabled at
// the end of the test.
func follow(tb testing.TB, also func(ctx context.Context, call, name string)) *pointLog {
	tb.Helper()
	pl := &pointLog{points: make(map[string][]string)}
	disable := failpoint.Enable(func(ctx context.Context, name string) {
		call, ok := ctx.Value(callKey{}).(string)
		if !ok {
			return // another test's traffic
		}
		pl.mu.Lock()
		pl.points[call] = append(pl.points[call], name)
		pl.mu.Unlock()
		if also != nil {
			also(ctx, call, name)
		}
	})
	tb.Cleanup(disable)
	return pl
}

// of returns the points the call marked call reached, in order.
func (pl *pointLog) of(call string) []string {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return slices.Clone(pl.points[call])
}

// mark returns ctx marked as the call named call.
func mark(ctx context.Context, call string) context.Context {
	return context.WithValue(ctx, callKey{}, call)
}

func TestFailpoint_GetOrLoad_missOrder(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		c, _ := newCache(t, s, nil)
		pl := follow(t, nil)
		ctx := mark(testCtx(t), "miss")
		v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) { return "v", nil })
		if err != nil || v != "v" {
			t.Fatalf("GetOrLoad = %q, %v; want v", v, err)
		}
		got := pl.of("miss")
		want := []string{failpoint.CacheClaimed, failpoint.CacheLoaded, failpoint.CacheWritten, failpoint.CacheAnnounced}
		if !slices.Equal(got, want) {
			t.Fatalf("a miss reached the points %q, want %q", got, want)
		}
	})
}

// TestFailpoint_GetOrLoad_waiterSeesClaim pauses a rebuild at
// CacheClaimed until a caller of another Cache (another process's stand-in)
// reports CacheWait: that caller waits for the claim and gets the
// rebuild's value without running its own loader.
func TestFailpoint_GetOrLoad_waiterSeesClaim(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		opts := &cache.Options{Namespace: namespace(t), WaitTimeout: time.Minute}
		first, second := newCacheOn(t, s.Client(t), opts), newCacheOn(t, s.Client(t), opts)

		claimed, waited := make(chan struct{}), make(chan struct{})
		var claimedOnce, waitedOnce sync.Once
		pl := follow(t, func(hctx context.Context, call, name string) {
			switch {
			case call == "first" && name == failpoint.CacheClaimed:
				claimedOnce.Do(func() { close(claimed) })
				select { // the pause: the claim is held, the loader not yet run
				case <-waited:
				case <-ctx.Done():
				}
			case call == "second" && name == failpoint.CacheWait:
				waitedOnce.Do(func() { close(waited) })
			}
		})

		r1 := goGetOrLoad(mark(ctx, "first"), first, "k", func(context.Context) (string, error) { return "v1", nil })
		select {
		case <-claimed:
		case <-ctx.Done():
			t.Fatal("the first call never claimed the key")
		}
		var calls atomic.Int32
		r2 := goGetOrLoad(mark(ctx, "second"), second, "k", neverLoad[string](&calls))
		for i, r := range []<-chan result[string]{r1, r2} {
			select {
			case got := <-r:
				if got.err != nil || got.v != "v1" {
					t.Errorf("call %d: GetOrLoad = %q, %v; want v1", i+1, got.v, got.err)
				}
			case <-ctx.Done():
				t.Fatalf("call %d did not return", i+1)
			}
		}
		if n := calls.Load(); n != 0 {
			t.Errorf("the waiter's loader ran %d times, want 0", n)
		}
		if got := pl.of("second"); !slices.Contains(got, failpoint.CacheWait) || slices.Contains(got, failpoint.CacheClaimed) {
			t.Errorf("the waiter reached %q, want %s and no %s", got, failpoint.CacheWait, failpoint.CacheClaimed)
		}
		if got := pl.of("first"); slices.Contains(got, failpoint.CacheWait) {
			t.Errorf("the rebuild reached %q, want no %s", got, failpoint.CacheWait)
		}
	})
}

// TestFailpoint_GetOrLoadMany_deleteBeforeWrite: a batch has loaded a key
// and is stopped before its write; another process deletes the key; a
// GetOrLoad of the batch's process that starts after the Delete returned
// must not return the batch's value (read your writes), whether or not it
// meets the batch's run. Found by the robustness suite (seed 1, Redis 8.6).
func TestFailpoint_GetOrLoadMany_deleteBeforeWrite(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		opts := &cache.Options{Namespace: namespace(t), WaitTimeout: 10 * time.Second}
		c, other := newCacheOn(t, s.Client(t), opts), newCacheOn(t, s.Client(t), opts)

		loaded, release := make(chan struct{}), make(chan struct{})
		var loadedOnce sync.Once
		follow(t, func(hctx context.Context, call, name string) {
			if call == "batch" && name == failpoint.CacheLoaded {
				loadedOnce.Do(func() { close(loaded) })
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
		})
		batch := make(chan error, 1)
		go func() {
			_, err := cache.GetOrLoadMany(mark(ctx, "batch"), c, []string{"k"}, func(context.Context, []string) (map[string]string, error) {
				return map[string]string{"k": "old"}, nil
			})
			batch <- err
		}()
		redistest.Recv(t, ctx, loaded, "the batch's load")
		if err := other.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		r := goGetOrLoad(mark(ctx, "reader"), c, "k", func(context.Context) (string, error) { return "new", nil })
		var got result[string]
		select {
		case got = <-r:
			close(release)
		case <-time.After(2 * time.Second): // it is waiting for the batch, if it ever returns: let the batch go
			close(release)
			got = redistest.Recv(t, ctx, r, "the reader")
		}
		if err := redistest.Recv(t, ctx, batch, "the batch"); err != nil {
			t.Fatalf("batch: %v", err)
		}
		if got.err != nil || got.v != "new" {
			t.Fatalf("GetOrLoad after the Delete = %q, %v; want new (its own load): %q is from before the Delete", got.v, got.err, "old")
		}
	})
}

// TestGetOrLoadMany_deleteDuringLoadBesideOthers: a Delete made while a batch loads a
// missing key wins: the batch's write of that key is a no-op, and a read
// after both sees nothing. Found by the robustness suite (seed 1, Redis
// 8.6, namespace exp).
func TestGetOrLoadMany_deleteDuringLoadBesideOthers(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		opts := &cache.Options{Namespace: namespace(t), Expiry: cache.ExpiryPolicy{Fresh: 300 * time.Millisecond, Stale: 400 * time.Millisecond}}
		c, other := newCacheOn(t, s.Client(t), opts), newCacheOn(t, s.Client(t), opts)
		if err := cache.Set(ctx, c, "hit", "h"); err != nil {
			t.Fatal(err)
		}
		loading, release := make(chan struct{}), make(chan struct{})
		batch := make(chan error, 1)
		go func() {
			_, err := cache.GetOrLoadMany(ctx, c, []string{"hit", "k", "gone"}, func(_ context.Context, keys []string) (map[string]string, error) {
				close(loading)
				<-release
				return map[string]string{"k": "old"}, nil
			})
			batch <- err
		}()
		redistest.Recv(t, ctx, loading, "the batch's load")
		if err := other.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		close(release)
		if err := redistest.Recv(t, ctx, batch, "the batch"); err != nil {
			t.Fatalf("batch: %v", err)
		}
		if v, err := cache.Get[string](ctx, other, "k"); err == nil {
			t.Fatalf("Get after the Delete and the batch = %q: the batch's load, begun before the Delete, was written after it", v)
		}
	})
}
