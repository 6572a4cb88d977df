package cache_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/redis/go-redis/v9"
)

// TestGetOrLoad_callerCancels: a caller that gives up returns its ctx
// error at once; the load goes on, undisturbed, for the caller that shares
// the flight and for a caller in another Cache waiting on the claim.
func TestGetOrLoad_callerCancels(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		rc := s.Client(t)
		a := newCacheOn(t, rc, &cache.Options{Namespace: ns})
		b := newCacheOn(t, rc, &cache.Options{Namespace: ns})
		release, open := gate(t)
		started := make(chan struct{})
		var loads atomic.Int32
		load := func(ctx context.Context) (string, error) {
			if loads.Add(1) == 1 {
				close(started)
			}
			select {
			case <-release:
				return "v", nil
			case <-ctx.Done():
				return "", fmt.Errorf("the load's context ended: %w", ctx.Err())
			}
		}

		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		first := goGetOrLoad(cctx, a, "k", load)
		redistest.Recv(t, ctx, started, "the load to start")
		joiner := goGetOrLoad(ctx, a, "k", load)
		other := goGetOrLoad(ctx, b, "k", load)

		cancel()
		// The load is still blocked, so this returns only if the cancelled
		// caller does not wait for it.
		r := redistest.Recv(t, ctx, first, "the cancelled caller to return")
		if !errors.Is(r.err, context.Canceled) || r.v != "" {
			t.Fatalf("cancelled caller got %q, %v; want context.Canceled", r.v, r.err)
		}

		open()
		for name, ch := range map[string]<-chan result[string]{"joiner": joiner, "caller in another Cache": other} {
			r := redistest.Recv(t, ctx, ch, name)
			if r.err != nil || r.v != "v" {
				t.Errorf("%s got %q, %v; want v", name, r.v, r.err)
			}
		}
		if n := loads.Load(); n != 1 {
			t.Errorf("%d loads, want 1", n)
		}
		if v, err := cache.Get[string](ctx, b, "k"); err != nil || v != "v" {
			t.Errorf("Get after the load = %q, %v; want v stored", v, err)
		}
	})
}

// TestGetOrLoad_freshHitIsOneGet: a fresh hit sends one GET of the value
// key and nothing else: no lock, no script, no publish.
func TestGetOrLoad_freshHitIsOneGet(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		c, rec := recordedCache(t, s, &cache.Options{Namespace: ns, Expiry: cache.ExpiryPolicy{Stale: time.Minute}})
		if v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (user, error) { return user{1, "ada"}, nil }); err != nil || v.Name != "ada" {
			t.Fatalf("first call: %+v, %v", v, err)
		}
		if len(rec.reset()) == 0 {
			t.Fatal("the recorder saw no command for the miss: the hook does not work")
		}
		var calls atomic.Int32
		const hits = 3
		for i := range hits {
			v, err := cache.GetOrLoad(ctx, c, "k", neverLoad[user](&calls))
			if err != nil || v != (user{1, "ada"}) {
				t.Fatalf("hit %d: %+v, %v", i, v, err)
			}
		}
		cmds := rec.reset()
		if len(cmds) != hits {
			t.Fatalf("%d hits sent %d commands, want %d: %q", hits, len(cmds), hits, cmds)
		}
		for _, cmd := range cmds {
			if len(cmd) != 2 || cmd[0] != "get" || cmd[1] != valueKey(ns, "k") {
				t.Errorf("a hit sent %q, want [get %s]", cmd, valueKey(ns, "k"))
			}
		}
		if st := c.Stats(); st.Hits != hits || st.Loads != 1 || calls.Load() != 0 {
			t.Errorf("stats = %+v, loader calls %d; want %d hits, 1 load", st, calls.Load(), hits)
		}
	})
}

// TestGetOrLoad_missClaimsAtOnce: a caller whose read finds the key
// absent claims it at once; the claim (SET NX) is the second and last
// command before the loader runs, so the cluster's one rebuild starts a
// round trip after the read, as a process loading alone would.
func TestGetOrLoad_missClaimsAtOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		c, rec := recordedCache(t, s, &cache.Options{Namespace: ns})
		// First use probes the server: on another key, before counting.
		if _, err := cache.GetOrLoad(ctx, c, "warm", func(context.Context) (int, error) { return 1, nil }); err != nil {
			t.Fatal(err)
		}
		rec.reset()
		var before [][]string
		v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (int, error) {
			before = rec.reset()
			return 7, nil
		})
		if err != nil || v != 7 {
			t.Fatalf("GetOrLoad = %d, %v; want 7", v, err)
		}
		if len(before) != 2 || before[0][0] != "get" || before[1][0] != "set" || !slices.ContainsFunc(before[1], func(a string) bool { return strings.EqualFold(a, "nx") }) {
			t.Fatalf("before the load: %q; want a GET, then the claim (SET NX)", before)
		}
		for _, cmd := range before {
			if cmd[1] != valueKey(ns, "k") {
				t.Errorf("%q is not on the value key %s", cmd, valueKey(ns, "k"))
			}
		}
	})
}

// TestGetOrLoad_flightDecodedOnce: the callers of one flight decode its
// value once in each process, and get the same value: in the process that
// loads, and in one that waits for the announcement. (Decoded by each,
// the wake-up of every waiting process at the load's end cost a decode
// per caller.)
func TestGetOrLoad_flightDecodedOnce(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		const callers = 8
		var decodesA, decodesB atomic.Int64
		a, _ := newCache(t, s, &cache.Options{Namespace: ns, Codec: countingCodec{&decodesA}})
		b, _ := newCache(t, s, &cache.Options{Namespace: ns, Codec: countingCodec{&decodesB}})
		release := make(chan struct{})
		started := make(chan struct{}, 1)
		load := func(ctx context.Context) ([]int, error) {
			started <- struct{}{}
			select {
			case <-release:
				return []int{1, 2, 3}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		type got struct {
			v   []int
			err error
		}
		results := make(chan got, 2*callers)
		for range callers {
			go func() {
				v, err := cache.GetOrLoad(ctx, a, "k", load)
				results <- got{v, err}
			}()
		}
		redistest.Recv(t, ctx, started, "the load to start")
		for range callers {
			go func() {
				v, err := cache.GetOrLoad(ctx, b, "k", load)
				results <- got{v, err}
			}()
		}
		redistest.WaitFor(t, ctx, "every caller to join its process's flight", func() bool {
			return cache.Joined(a, "k") == callers && cache.Joined(b, "k") == callers && b.Stats().Waits == 1
		})
		close(release)
		for range 2 * callers {
			r := redistest.Recv(t, ctx, results, "a caller's answer")
			if r.err != nil || !slices.Equal(r.v, []int{1, 2, 3}) {
				t.Fatalf("GetOrLoad = %v, %v; want [1 2 3]", r.v, r.err)
			}
		}
		if n, m := decodesA.Load(), decodesB.Load(); n != 1 || m != 1 {
			t.Errorf("decodes: %d in the loading process, %d in the waiting one; want 1 in each (%d callers each)", n, m, callers)
		}
	})
}

// TestGetOrLoad_burstTakesTheLoad: a caller whose read found the key free
// and returned only after its process's flight sent its claim (as in a
// cold burst: every caller's read in flight at once) takes that flight's
// load without reading the key again, since the claim held the key until
// the load's write, which came after that read. (Taken only when the
// flight's claim was sent after its read returned, it read the key again,
// one round trip more at the instant every process wakes.)
func TestGetOrLoad_burstTakesTheLoad(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		c, rec := recordedCache(t, s, &cache.Options{Namespace: ns})
		key := valueKey(ns, "k")
		claiming, bRead, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
		var gets, getsAfter atomic.Int64
		var released atomic.Bool
		rec.onBefore(func(args []string) {
			switch {
			case len(args) < 2 || args[1] != key:
			case args[0] == "get" && released.Load():
				getsAfter.Add(1)
			case args[0] == "set" && slices.ContainsFunc(args, func(a string) bool { return strings.EqualFold(a, "nx") }):
				// The claim, sent once B's read is on its way back.
				close(claiming)
				<-bRead
			}
		})
		rec.onAfter(func(args []string, _ error) {
			if len(args) > 1 && args[0] == "get" && args[1] == key && gets.Add(1) == 2 {
				close(bRead) // B's read found the key free, before the claim
			}
		})
		load := releasedLoader(release, 7)
		type got struct {
			v   int
			err error
		}
		results := make(chan got, 2)
		call := func() {
			v, err := cache.GetOrLoad(ctx, c, "k", load)
			results <- got{v, err}
		}
		go call() // A: reads, claims and loads
		redistest.Recv(t, ctx, claiming, "A's claim")
		go call() // B: reads while the claim is held back, and joins A's flight
		redistest.WaitFor(t, ctx, "B to join A's flight", func() bool { return cache.Joined(c, "k") == 2 })
		released.Store(true)
		close(release)
		for range 2 {
			if r := redistest.Recv(t, ctx, results, "an answer"); r.err != nil || r.v != 7 {
				t.Fatalf("GetOrLoad = %d, %v; want 7", r.v, r.err)
			}
		}
		if n := getsAfter.Load(); n != 0 {
			t.Errorf("%d GETs of the key after the load; want none (B takes A's load)", n)
		}
	})
}

// TestGetOrLoad_burstTakesTheWait: the same in a process that waits for
// another's load: a caller whose read found the key free, returned after
// its flight sent the claim that found another process's, takes the
// announced value when a later read of its flight found that claim still
// there, without reading the key again.
func TestGetOrLoad_burstTakesTheWait(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		client := func() (redis.UniversalClient, *recorder) {
			rc := s.NewClient()
			t.Cleanup(func() { _ = rc.Close() })
			return rc, record(rc)
		}
		rcA, recA := client()
		rcB, recB := client()
		a := newCacheOn(t, rcA, &cache.Options{Namespace: ns})
		b := newCacheOn(t, rcB, &cache.Options{Namespace: ns})
		key := valueKey(ns, "k")
		isClaim := func(args []string) bool {
			return len(args) > 1 && args[0] == "set" && args[1] == key && slices.ContainsFunc(args, func(a string) bool { return strings.EqualFold(a, "nx") })
		}
		isGet := func(args []string) bool { return len(args) > 1 && args[0] == "get" && args[1] == key }
		aClaimed, b2Read, b2Claiming, b3Read, b3Joined, release := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
		var sentB, getsB, getsAfter atomic.Int64
		var released atomic.Bool
		recA.onBefore(func(args []string) {
			if isClaim(args) {
				<-b3Read // A claims once B3's read found the key free
			}
		})
		recA.onAfter(func(args []string, _ error) {
			if isClaim(args) {
				close(aClaimed)
			}
		})
		recB.onBefore(func(args []string) {
			switch {
			case isGet(args) && released.Load():
				getsAfter.Add(1)
			case isGet(args) && sentB.Add(1) == 3:
				// B2's flight reads the key again once subscribed: only
				// after B3's read has returned (B3 has joined), which
				// is what makes that read's claim a proof for B3.
				select {
				case <-b3Joined:
				case <-ctx.Done():
				}
			case isClaim(args):
				close(b2Claiming) // B2's claim, which finds A's
				<-aClaimed
			}
		})
		recB.onAfter(func(args []string, _ error) {
			if !isGet(args) {
				return
			}
			switch getsB.Add(1) {
			case 1:
				close(b2Read)
			case 2:
				<-b2Claiming // B3's read returns after B2's flight sent its claim
				close(b3Read)
			}
		})
		load := releasedLoader(release, 7)
		results := make(chan error, 3)
		call := func(c *cache.Cache) {
			v, err := cache.GetOrLoad(ctx, c, "k", load)
			if err == nil && v != 7 {
				err = fmt.Errorf("got %d, want 7", v)
			}
			results <- err
		}
		go call(a) // A: reads, and claims once B3 has read
		go call(b) // B2: reads, claims (finding A's claim) and waits
		redistest.Recv(t, ctx, b2Read, "B2's read")
		go call(b) // B3: reads the key free, and joins B2's flight
		redistest.WaitFor(t, ctx, "B3 to join B2's flight", func() bool { return cache.Joined(b, "k") == 2 })
		close(b3Joined)
		redistest.WaitFor(t, ctx, "B2's flight to read the key again", func() bool { return getsB.Load() >= 3 })
		released.Store(true)
		close(release)
		for range 3 {
			if err := redistest.Recv(t, ctx, results, "an answer"); err != nil {
				t.Fatal(err)
			}
		}
		if n := getsAfter.Load(); n != 0 {
			t.Errorf("%d GETs of the key in B's process after the load; want none (B3 takes the announced value)", n)
		}
	})
}

// countingCodec is cache.Msgpack counting its decodes in n.
type countingCodec struct{ n *atomic.Int64 }

func (countingCodec) Marshal(v any) ([]byte, error) { return cache.Msgpack.Marshal(v) }

func (c countingCodec) Unmarshal(b []byte, v any) error {
	c.n.Add(1)
	return cache.Msgpack.Unmarshal(b, v)
}

// TestGetOrLoad_negative: loader.ErrNotFound is remembered for
// Expiry.Negative, in every Cache, and not at all without it.
func TestGetOrLoad_negative(t *testing.T) {
	tests := []struct {
		name      string
		negative  time.Duration
		wantLoads int32
		wantGet   error
	}{
		{"remembered", time.Minute, 1, loader.ErrNotFound},
		{"not remembered", 0, 3, cache.ErrMiss},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testCtx(t)
				clk := newClock()
				opts := cache.Options{Namespace: namespace(t), Expiry: cache.ExpiryPolicy{Negative: tt.negative}, Now: clk.Now}
				rc := s.Client(t)
				a, b := newCacheOn(t, rc, &opts), newCacheOn(t, rc, &opts)
				var loads atomic.Int32
				notFound := func(context.Context) (user, error) {
					loads.Add(1)
					return user{}, fmt.Errorf("user 9: %w", loader.ErrNotFound)
				}
				for i, c := range []*cache.Cache{a, a, b} {
					if v, err := cache.GetOrLoad(ctx, c, "user:9", notFound); !errors.Is(err, loader.ErrNotFound) || v != (user{}) {
						t.Fatalf("call %d: %+v, %v; want ErrNotFound", i, v, err)
					}
				}
				if n := loads.Load(); n != tt.wantLoads {
					t.Errorf("%d loads, want %d", n, tt.wantLoads)
				}
				if _, err := cache.Get[user](ctx, a, "user:9"); !errors.Is(err, tt.wantGet) {
					t.Errorf("Get: %v, want %v", err, tt.wantGet)
				}
				if tt.negative == 0 {
					return
				}
				// Past Expiry.Negative the loader runs again, and its value is kept.
				clk.Advance(2 * tt.negative)
				v, err := cache.GetOrLoad(ctx, a, "user:9", func(context.Context) (user, error) { loads.Add(1); return user{9, "ida"}, nil })
				if err != nil || v != (user{9, "ida"}) || loads.Load() != tt.wantLoads+1 {
					t.Errorf("after Expiry.Negative: %+v, %v, %d loads; want a new load", v, err, loads.Load())
				}
			})
		}
	})
}
