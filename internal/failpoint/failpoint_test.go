package failpoint_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hotkv/stampede/internal/failpoint"
)

type callKey struct{}

func TestFailpoint_Enable(t *testing.T) {
	failpoint.Inject(t.Context(), failpoint.CacheClaimed) // no hook: nothing happens

	var got []string
	disable := failpoint.Enable(func(ctx context.Context, name string) {
		if ctx.Value(callKey{}) == "mine" {
			got = append(got, name)
		}
	})
	t.Cleanup(disable)
	ctx := context.WithValue(t.Context(), callKey{}, "mine")
	failpoint.Inject(ctx, failpoint.CacheClaimed)
	failpoint.Inject(t.Context(), failpoint.CacheLoaded) // not this test's call
	failpoint.Inject(ctx, failpoint.LockRelease)
	disable()
	failpoint.Inject(ctx, failpoint.CacheWritten) // disabled
	disable()                                     // twice: no effect

	want := []string{failpoint.CacheClaimed, failpoint.LockRelease}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("hook saw %q, want %q", got, want)
	}
}

func TestFailpoint_Enable_replaces(t *testing.T) {
	tests := []struct {
		name       string
		second     bool // the second Enable is of a hook; else of nil
		disableOld bool // the first hook's disable is called after the second Enable
		wantSecond int  // calls of the second hook by one Inject (the first's: none)
	}{
		{name: "second replaces first", second: true, wantSecond: 1},
		{name: "first's disable leaves second", second: true, disableOld: true, wantSecond: 1},
		{name: "nil removes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var first, second int
			d1 := failpoint.Enable(func(context.Context, string) { first++ })
			t.Cleanup(d1)
			var fn func(context.Context, string)
			if tt.second {
				fn = func(context.Context, string) { second++ }
			}
			d2 := failpoint.Enable(fn)
			t.Cleanup(d2)
			if tt.disableOld {
				d1()
			}
			failpoint.Inject(t.Context(), failpoint.LockObtained)
			if first != 0 || second != tt.wantSecond {
				t.Fatalf("first hook called %d times, second %d; want 0 and %d", first, second, tt.wantSecond)
			}
			d2()
			failpoint.Inject(t.Context(), failpoint.LockObtained)
			if first != 0 || second != tt.wantSecond {
				t.Fatalf("after disable: first hook called %d times, second %d; want 0 and %d", first, second, tt.wantSecond)
			}
		})
	}
}

// TestFailpoint_Inject_concurrent injects from many goroutines while
// hooks are enabled and disabled (run with -race): every call goes to a
// hook that was set, or to none.
func TestFailpoint_Inject_concurrent(t *testing.T) {
	var calls atomic.Int64
	hook := func(context.Context, string) { calls.Add(1) }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					failpoint.Inject(t.Context(), failpoint.CacheWait)
				}
			}
		})
	}
	for range 1000 {
		disable := failpoint.Enable(hook)
		failpoint.Inject(t.Context(), failpoint.CacheWait) // at least this one
		disable()
	}
	close(stop)
	wg.Wait()
	if n := calls.Load(); n < 1000 {
		t.Fatalf("hook called %d times, want at least 1000", n)
	}
	before := calls.Load()
	failpoint.Inject(t.Context(), failpoint.CacheWait)
	if calls.Load() != before {
		t.Fatal("hook called after every disable returned")
	}
}

func BenchmarkInject_disabled(b *testing.B) {
	ctx := b.Context()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			failpoint.Inject(ctx, failpoint.CacheClaimed)
		}
	})
}
