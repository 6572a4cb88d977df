package cache_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// TestGetOrLoad_waitTimeout: a Cache that waits for another's load gives
// up after WaitTimeout with ErrWaitTimeout, or loads on its own (without
// storing) with LoadOnWaitTimeout.
func TestGetOrLoad_waitTimeout(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		rc := s.Client(t)
		a := newCacheOn(t, rc, &cache.Options{Namespace: ns})
		short := cache.Options{Namespace: ns, WaitTimeout: 300 * time.Millisecond, PollInterval: 50 * time.Millisecond}
		b := newCacheOn(t, rc, &short)
		short.LoadOnWaitTimeout = true
		own := newCacheOn(t, rc, &short)

		started := make(chan struct{})
		release, open := gate(t)
		holder := goGetOrLoad(ctx, a, "k", heldLoader(started, release, "a"))
		redistest.Recv(t, ctx, started, "cache a to claim the key and load")

		var calls atomic.Int32
		if v, err := cache.GetOrLoad(ctx, b, "k", neverLoad[string](&calls)); !errors.Is(err, cache.ErrWaitTimeout) {
			t.Errorf("waiting cache: %q, %v; want ErrWaitTimeout", v, err)
		}
		if st := b.Stats(); st.Waits != 1 || st.WaitTimeouts != 1 || st.Loads != 0 || calls.Load() != 0 {
			t.Errorf("waiting cache stats = %+v; want 1 wait, 1 timeout, no load", st)
		}
		if v, err := cache.GetOrLoad(ctx, own, "k", func(context.Context) (string, error) { return "own", nil }); err != nil || v != "own" {
			t.Errorf("LoadOnWaitTimeout cache: %q, %v; want its own load", v, err)
		}
		if st := own.Stats(); st.WaitTimeouts != 1 || st.Loads != 1 {
			t.Errorf("LoadOnWaitTimeout stats = %+v; want 1 timeout, 1 load", st)
		}

		open()
		if r := redistest.Recv(t, ctx, holder, "cache a's load"); r.err != nil || r.v != "a" {
			t.Fatalf("cache a: %q, %v", r.v, r.err)
		}
		if v, err := cache.Get[string](ctx, b, "k"); err != nil || v != "a" {
			t.Errorf("Get = %q, %v; want a (a timed-out waiter's own load is not stored)", v, err)
		}
	})
}

// TestGetOrLoad_remoteFailure: a Cache waiting for another's load learns
// of its failure from the announcement, at once, not by timing out.
func TestGetOrLoad_remoteFailure(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		rc := s.Client(t)
		a := newCacheOn(t, rc, &cache.Options{Namespace: ns})
		// Polls and the wait limit lie far beyond the test: only the
		// announcement can end the wait with ErrRemoteLoad.
		var waitEvents atomic.Int32
		b := newCacheOn(t, rc, &cache.Options{Namespace: ns, PollInterval: 30 * time.Second, WaitTimeout: time.Minute,
			Observer: func(e cache.Event) {
				if e.Kind == cache.EventWait && errors.Is(e.Err, cache.ErrRemoteLoad) {
					waitEvents.Add(1)
				}
			}})

		started := make(chan struct{})
		fail, open := gate(t)
		holder := goGetOrLoad(ctx, a, "k", func(context.Context) (string, error) {
			close(started)
			<-fail
			return "", errors.New("upstream answered 503")
		})
		redistest.Recv(t, ctx, started, "cache a to claim the key and load")
		var calls atomic.Int32
		waiter := goGetOrLoad(ctx, b, "k", neverLoad[string](&calls))
		// Fail a's load once b waits with a subscription confirmed before
		// its read: an error is announced, never stored, so a b whose
		// read came after the failure would find the key free and load,
		// as a new caller would (b's first subscription is confirmed
		// after its first read, which sends it to read the key again).
		redistest.WaitFor(t, ctx, "cache b to wait, subscribed", func() bool { return cache.CoveredWaits(b) > 0 })
		open()

		if r := redistest.Recv(t, ctx, holder, "cache a"); r.err == nil || !strings.Contains(r.err.Error(), "upstream answered 503") {
			t.Errorf("cache a: %q, %v; want its loader's error", r.v, r.err)
		}
		r := redistest.Recv(t, ctx, waiter, "cache b")
		if !errors.Is(r.err, cache.ErrRemoteLoad) || !strings.Contains(r.err.Error(), "upstream answered 503") {
			t.Errorf("cache b: %q, %v; want ErrRemoteLoad with a's error text", r.v, r.err)
		}
		if st := b.Stats(); st.WaitTimeouts != 0 || st.Loads != 0 || calls.Load() != 0 || waitEvents.Load() != 1 {
			t.Errorf("cache b stats = %+v, %d wait events; want no timeout, no load, one EventWait with ErrRemoteLoad", st, waitEvents.Load())
		}
		// The failure is not stored: the next call loads.
		if v, err := cache.GetOrLoad(ctx, b, "k", func(context.Context) (string, error) { return "b", nil }); err != nil || v != "b" {
			t.Errorf("next call: %q, %v; want a new load", v, err)
		}
	})
}

// TestGetOrLoad_remoteFailure_polling: a waiter that polls the key often
// still learns of a failed load from its announcement, whenever its polls
// fall: the rebuilder frees its claim only after announcing the failure,
// so a poll never finds the key free before the announcement was sent
// (it did, freed first, and the waiter then loaded itself, about one
// round in ten with a 1ms poll).
func TestGetOrLoad_remoteFailure_polling(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		rc := s.Client(t)
		a := newCacheOn(t, rc, &cache.Options{Namespace: ns})
		b := newCacheOn(t, rc, &cache.Options{Namespace: ns, PollInterval: time.Millisecond, WaitTimeout: time.Minute})
		const rounds = 40
		for i := range rounds {
			key := fmt.Sprintf("k%d", i)
			started := make(chan struct{})
			fail, open := gate(t)
			holder := goGetOrLoad(ctx, a, key, func(context.Context) (string, error) {
				close(started)
				<-fail
				return "", errors.New("upstream answered 503")
			})
			redistest.Recv(t, ctx, started, "cache a to claim the key and load")
			var calls atomic.Int32
			covered := cache.CoveredWaits(b)
			waiter := goGetOrLoad(ctx, b, key, neverLoad[string](&calls))
			redistest.WaitFor(t, ctx, "cache b to wait, subscribed", func() bool { return cache.CoveredWaits(b) > covered })
			open()
			redistest.Recv(t, ctx, holder, "cache a")
			if r := redistest.Recv(t, ctx, waiter, "cache b"); !errors.Is(r.err, cache.ErrRemoteLoad) || calls.Load() != 0 {
				t.Fatalf("round %d: cache b: %q, %v (%d own loads); want ErrRemoteLoad", i, r.v, r.err, calls.Load())
			}
		}
	}, redistest.Redis8, redistest.Valkey, redistest.Miniredis)
}

// TestGetOrLoad_waitEndedByRead: a wait that ends by reading the key
// again, because the value was too large to come with the announcement,
// is reported as one EventWait with its duration, as a wait answered by
// the announcement is.
func TestGetOrLoad_waitEndedByRead(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		rc := s.Client(t)
		a := newCacheOn(t, rc, &cache.Options{Namespace: ns})
		var waits atomic.Int32
		var waited atomic.Int64
		b := newCacheOn(t, rc, &cache.Options{Namespace: ns, PollInterval: 30 * time.Second, WaitTimeout: time.Minute,
			Observer: func(e cache.Event) {
				if e.Kind == cache.EventWait && e.Err == nil {
					waits.Add(1)
					waited.Store(int64(e.Duration))
				}
			}})
		big := strings.Repeat("v", 64<<10) // far over what an announcement carries
		started := make(chan struct{})
		release, open := gate(t)
		holder := goGetOrLoad(ctx, a, "k", func(context.Context) (string, error) {
			close(started)
			<-release
			return big, nil
		})
		redistest.Recv(t, ctx, started, "cache a to claim the key and load")
		var calls atomic.Int32
		waiter := goGetOrLoad(ctx, b, "k", neverLoad[string](&calls))
		redistest.WaitFor(t, ctx, "cache b to wait", func() bool { return b.Stats().Waits == 1 })
		open()
		if r := redistest.Recv(t, ctx, holder, "cache a"); r.err != nil || r.v != big {
			t.Fatalf("cache a: %d bytes, %v", len(r.v), r.err)
		}
		if r := redistest.Recv(t, ctx, waiter, "cache b"); r.err != nil || r.v != big {
			t.Fatalf("cache b: %d bytes, %v; want a's value", len(r.v), r.err)
		}
		if n := waits.Load(); n != 1 || waited.Load() <= 0 || calls.Load() != 0 {
			t.Errorf("%d EventWait (last %v), %d loads by b; want one wait with its duration, no load", n, time.Duration(waited.Load()), calls.Load())
		}
	})
}

// TestGetOrLoad_readYourDeleteAcrossProcesses (issue 10, #16): a caller
// that starts after a Delete returned (in any process) does not get a value
// from before the Delete, even by joining a flight of its process that was
// waiting for a rebuild which wrote that value just before the Delete and
// whose announcement arrives after it. The Delete's own notice, which
// would wake that flight, is lost here (see TestDelete_wakesWaitersElsewhere
// for when it arrives).
func TestGetOrLoad_readYourDeleteAcrossProcesses(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		// Polls are off the table: only the announcement ends B's wait.
		opts := cache.Options{Namespace: ns, WaitTimeout: time.Minute, PollInterval: time.Minute}
		rcA := s.Client(t)
		recA := record(rcA)
		a := newCacheOn(t, rcA, &opts) // process 1: rebuilds
		// A's value stored and its announcement held back: the two-step
		// write (where the write's script cannot publish) has that window.
		cache.TwoStepWrites(a)
		b := newCacheOn(t, s.Client(t), &opts) // process 2: waits, then reads after the Delete
		rcD := s.Client(t)
		d := newCacheOn(t, rcD, &opts) // process 3: deletes

		// A's announcement is held back until the test lets it go.
		publishing := make(chan struct{}, 1)
		announce, letAnnounce := gate(t)
		recA.onBefore(func(args []string) {
			if isAnnouncement(args, ns) {
				publishing <- struct{}{}
				<-announce
			}
		})

		started := make(chan struct{})
		release, open := gate(t)
		a1 := goGetOrLoad(ctx, a, "k", heldLoader(started, release, "before the Delete"))
		redistest.Recv(t, ctx, started, "A's load to start")
		var calls atomic.Int32
		b1 := goGetOrLoad(ctx, b, "k", neverLoad[string](&calls))
		redistest.WaitFor(t, ctx, "B to wait for A's claim", func() bool { return b.Stats().Waits == 1 })
		open()
		redistest.Recv(t, ctx, publishing, "A to write and announce")
		if v, err := cache.Get[string](ctx, d, "k"); err != nil || v != "before the Delete" {
			t.Fatalf("A's value is not stored: %q, %v", v, err)
		}

		// What Delete does, less its notice to other processes: as if the
		// notice were lost.
		if err := rcD.Del(ctx, valueKey(ns, "k"), valueKey(ns, "k")+":lock").Err(); err != nil {
			t.Fatal(err)
		}
		b2 := goGetOrLoad(ctx, b, "k", func(context.Context) (string, error) { return "loaded after the Delete", nil })
		redistest.WaitFor(t, ctx, "B's second caller to join B's flight", func() bool { return cache.Joined(b, "k") == 2 })
		letAnnounce()

		if r := redistest.Recv(t, ctx, b2, "B's caller after the Delete"); r.err != nil || r.v != "loaded after the Delete" {
			t.Errorf("B's caller after the Delete got %q, %v; want a load after the Delete", r.v, r.err)
		}
		// The callers that began before the Delete may have either value.
		if r := redistest.Recv(t, ctx, a1, "A's caller"); r.err != nil || r.v != "before the Delete" {
			t.Errorf("A's caller got %q, %v", r.v, r.err)
		}
		if r := redistest.Recv(t, ctx, b1, "B's caller before the Delete"); r.err != nil {
			t.Errorf("B's caller before the Delete got %q, %v", r.v, r.err)
		}
		if v, err := cache.Get[string](ctx, d, "k"); err != nil || v != "loaded after the Delete" {
			t.Errorf("stored afterwards: %q, %v; want the load after the Delete", v, err)
		}
		if calls.Load() != 0 {
			t.Errorf("B's first loader ran %d times", calls.Load())
		}
	}, redistest.Redis8, redistest.Redis7)
}

// TestGetOrLoad_readYourDeleteJoiningOwnLoad (issue 10, #16): a caller that
// starts after a Delete in another process returned does not join a load of
// its own process that began before the Delete (the Delete removed that
// load's claim, so its result is not stored): it loads anew.
func TestGetOrLoad_readYourDeleteJoiningOwnLoad(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		opts := cache.Options{Namespace: namespace(t)}
		b := newCacheOn(t, s.Client(t), &opts) // the process that loads and reads
		d := newCacheOn(t, s.Client(t), &opts) // the process that deletes

		started := make(chan struct{})
		release, open := gate(t)
		b1 := goGetOrLoad(ctx, b, "k", heldLoader(started, release, "loaded before the Delete"))
		redistest.Recv(t, ctx, started, "B's load to start")
		if err := d.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		b2 := goGetOrLoad(ctx, b, "k", func(context.Context) (string, error) { return "loaded after the Delete", nil })
		redistest.WaitFor(t, ctx, "B's second caller to join B's load", func() bool { return cache.Joined(b, "k") == 2 })
		open()

		if r := redistest.Recv(t, ctx, b2, "B's caller after the Delete"); r.err != nil || r.v != "loaded after the Delete" {
			t.Errorf("B's caller after the Delete got %q, %v; want a load after the Delete", r.v, r.err)
		}
		if r := redistest.Recv(t, ctx, b1, "B's caller before the Delete"); r.err != nil || r.v != "loaded before the Delete" {
			t.Errorf("B's caller before the Delete got %q, %v; want its own load", r.v, r.err)
		}
		if v, err := cache.Get[string](ctx, d, "k"); err != nil || v != "loaded after the Delete" {
			t.Errorf("stored afterwards: %q, %v; want the load after the Delete", v, err)
		}
		if st := b.Stats(); st.Misses != 2 || st.Coalesced != 1 || st.Loads != 2 || st.WritesSkipped != 1 {
			t.Errorf("stats %+v; want 2 misses, 1 coalesced, 2 loads and the first load's write skipped", st)
		}
	}, redistest.Redis8, redistest.Redis7)
}

// WaitTimeout holds even when it is not shorter than LoadTimeout: the wait
// and the load have limits of their own.
func TestGetOrLoad_waitTimeoutEqualsLoadTimeout(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	ns := namespace(t)
	rc := s.Client(t)
	holder := newCacheOn(t, rc, &cache.Options{Namespace: ns, LoadTimeout: time.Minute})
	release := make(chan struct{})
	loading := make(chan struct{})
	held := make(chan error, 1)
	go func() {
		_, err := cache.GetOrLoad(ctx, holder, "k", func(ctx context.Context) (string, error) {
			close(loading)
			<-release
			return "holder's", nil
		})
		held <- err
	}()
	<-loading
	defer func() { close(release); <-held }()

	for _, fallback := range []bool{false, true} {
		waiter := newCacheOn(t, rc, &cache.Options{Namespace: ns, WaitTimeout: 300 * time.Millisecond,
			LoadTimeout: 300 * time.Millisecond, PollInterval: 50 * time.Millisecond, LoadOnWaitTimeout: fallback})
		v, err := cache.GetOrLoad(ctx, waiter, "k", func(context.Context) (string, error) { return "own", nil })
		if fallback {
			if err != nil || v != "own" {
				t.Errorf("LoadOnWaitTimeout: %q, %v; want its own load", v, err)
			}
		} else if !errors.Is(err, cache.ErrWaitTimeout) {
			t.Errorf("err = %v, want ErrWaitTimeout", err)
		}
		if st := waiter.Stats(); st.WaitTimeouts != 1 {
			t.Errorf("WaitTimeouts = %d, want 1", st.WaitTimeouts)
		}
	}
}

// A caller that starts after Delete or Set returned must not join a load
// that began before it: it gets what the server holds now (a new load
// after Delete, the set value after Set), while the earlier caller still
// gets its own load's result, which is not stored.
func TestGetOrLoad_afterDeleteOrSetStartsAfresh(t *testing.T) {
	for _, tt := range []struct {
		name   string
		change func(ctx context.Context, c *cache.Cache) error
		want   string
	}{
		{"Delete", func(ctx context.Context, c *cache.Cache) error { return c.Delete(ctx, "k") }, "loaded after"},
		{"Set", func(ctx context.Context, c *cache.Cache) error { return cache.Set(ctx, c, "k", "set") }, "set"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
				ctx := testCtx(t)
				c, _ := newCache(t, s, nil)
				wait, open := gate(t)
				loading := make(chan struct{})
				before := goGetOrLoad(ctx, c, "k", func(context.Context) (string, error) {
					close(loading)
					<-wait
					return "loaded before", nil
				})
				redistest.Recv(t, ctx, loading, "the first load to start")
				if err := tt.change(ctx, c); err != nil {
					t.Fatal(err)
				}
				// The first load is still blocked: joining it would hang here.
				after := goGetOrLoad(ctx, c, "k", func(context.Context) (string, error) { return "loaded after", nil })
				if r := redistest.Recv(t, ctx, after, "the caller after "+tt.name); r.err != nil || r.v != tt.want {
					t.Fatalf("GetOrLoad after %s = %q, %v; want %q", tt.name, r.v, r.err, tt.want)
				}
				open()
				if r := redistest.Recv(t, ctx, before, "the caller before"); r.err != nil || r.v != "loaded before" {
					t.Fatalf("GetOrLoad before %s = %q, %v; want its own load", tt.name, r.v, r.err)
				}
				redistest.WaitFor(t, ctx, "the first load's write to be skipped", func() bool { return c.Stats().WritesSkipped == 1 })
				if v, err := cache.Get[string](ctx, c, "k"); err != nil || v != tt.want {
					t.Errorf("stored afterwards: %q, %v; want %q", v, err, tt.want)
				}
			}, redistest.Redis8, redistest.Redis7)
		})
	}
}
