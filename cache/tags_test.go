package cache_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// versioned is a loader that counts its calls and returns "v<n>" for the
// n-th.
func versioned(calls *atomic.Int64) loader.Func[string] {
	return func(context.Context) (string, error) {
		return fmt.Sprintf("v%d", calls.Add(1)), nil
	}
}

// twoProcesses returns two Caches in one namespace on s, each with a
// client of its own, standing in for two processes.
func twoProcesses(t *testing.T, s *redistest.Server) (a, b *cache.Cache) {
	ns := namespace(t)
	return newCacheOn(t, s.Client(t), &cache.Options{Namespace: ns}), newCacheOn(t, s.Client(t), &cache.Options{Namespace: ns})
}

// recordKey is where a Cache in namespace ns keeps a short printable tag's
// record.
func recordKey(ns, tag string) string { return ns + ":{tag " + tag + "}" }

// A hard invalidation of a tag: every value stored with it is loaded again,
// once in all processes, wherever its key lives (on a Cluster: other
// slots than the record's), and values without it stay.
func TestInvalidateTag_hard(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		a, b := twoProcesses(t, s)
		var calls atomic.Int64
		for _, key := range []string{"user:1", "user:2", "post:9"} {
			tag := cache.WithTags("users", "k:"+key)
			if key == "post:9" {
				tag = cache.WithTags("posts")
			}
			if v, err := cache.GetOrLoad(ctx, a, key, constLoader("old", &calls), tag); err != nil || v != "old" {
				t.Fatalf("first load of %s = %q, %v", key, v, err)
			}
		}
		if err := b.InvalidateTag(ctx, "users"); err != nil {
			t.Fatal(err)
		}
		if _, err := cache.Get[string](ctx, a, "user:2"); !errors.Is(err, cache.ErrMiss) {
			t.Fatalf("Get of an invalidated value = %v, want ErrMiss", err)
		}
		if v, err := cache.Get[string](ctx, a, "post:9"); err != nil || v != "old" {
			t.Fatalf("Get of another tag's value = %q, %v; want old", v, err)
		}
		// Callers in both processes at once: one load, and nobody gets
		// the invalidated value.
		calls.Store(0)
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := range 16 {
			c := a
			if i%2 == 1 {
				c = b
			}
			wg.Go(func() {
				v, err := cache.GetOrLoad(ctx, c, "user:1", constLoader("new", &calls), cache.WithTags("users", "k:user:1"))
				if err != nil || v != "new" {
					errs <- fmt.Errorf("after InvalidateTag: GetOrLoad = %q, %v; want new", v, err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("loads after InvalidateTag = %d, want 1", n)
		}
		// The new value is current: no more loads.
		if v, err := cache.GetOrLoad(ctx, b, "user:1", neverLoad[string](new(atomic.Int32)), cache.WithTags("users", "k:user:1")); err != nil || v != "new" {
			t.Fatalf("after the reload: %q, %v; want new", v, err)
		}
	})
}

// A soft invalidation: the old value is served at once, stale, while one
// background refresh replaces it; then the new one is served.
func TestSoftInvalidateTag(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		a, b := twoProcesses(t, s)
		var calls atomic.Int64
		tags := cache.WithTags("catalog")
		if v, err := cache.GetOrLoad(ctx, a, "item", versioned(&calls), tags); err != nil || v != "v1" {
			t.Fatalf("first load = %q, %v", v, err)
		}
		if err := a.SoftInvalidateTag(ctx, "catalog"); err != nil {
			t.Fatal(err)
		}
		if v, err := cache.Get[string](ctx, b, "item"); !errors.Is(err, cache.ErrStale) || v != "v1" {
			t.Fatalf("Get after SoftInvalidateTag = %q, %v; want v1, ErrStale", v, err)
		}
		release, open := gate(t)
		slow := func(ctx context.Context) (string, error) {
			<-release
			return versioned(&calls)(ctx)
		}
		for _, c := range []*cache.Cache{a, b, a, b} {
			if v, err := cache.GetOrLoad(ctx, c, "item", slow, tags); err != nil || v != "v1" {
				t.Fatalf("while refreshing: %q, %v; want the stale v1 at once", v, err)
			}
		}
		open()
		redistest.WaitFor(t, ctx, "the refresh stored", func() bool {
			v, err := cache.Get[string](ctx, b, "item")
			return err == nil && v == "v2"
		})
		if n := calls.Load(); n != 2 {
			t.Errorf("loads = %d, want 2 (the first and one refresh)", n)
		}
		if st := a.Stats().StaleHits + b.Stats().StaleHits; st < 4 {
			t.Errorf("stale hits = %d, want at least 4", st)
		}
	})
}

// A load that began before an invalidation of its tag is not served to a
// call that began after it, in its own process (which joins its flight)
// or another, even though it is written.
func TestInvalidateTag_loadInProgress(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		a, b := twoProcesses(t, s)
		tags := cache.WithTags("t")
		started := make(chan struct{})
		release, open := gate(t)
		first := make(chan result[string], 1)
		go func() {
			v, err := cache.GetOrLoad(ctx, a, "k", heldLoader(started, release, "before"), tags)
			first <- result[string]{v, err}
		}()
		redistest.Recv(t, ctx, started, "the first load")
		if err := b.InvalidateTag(ctx, "t"); err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int64
		after := make(chan result[string], 2)
		for _, c := range []*cache.Cache{a, b} {
			go func() {
				v, err := cache.GetOrLoad(ctx, c, "k", constLoader("after", &calls), tags)
				after <- result[string]{v, err}
			}()
		}
		// Both are waiting for the load in progress (a joins its flight,
		// b waits for its claim): let it end.
		// Each reports its miss before it joins the flight or waits.
		redistest.WaitFor(t, ctx, "both waiting", func() bool {
			return a.Stats().Misses >= 2 && b.Stats().Misses >= 1
		})
		open()
		if r := redistest.Recv(t, ctx, first, "the first caller"); r.err != nil || r.v != "before" {
			t.Fatalf("the caller that began before = %q, %v; want before", r.v, r.err)
		}
		for range 2 {
			if r := redistest.Recv(t, ctx, after, "a caller after the invalidation"); r.err != nil || r.v != "after" {
				t.Errorf("a caller that began after InvalidateTag = %q, %v; want after", r.v, r.err)
			}
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("loads after the invalidation = %d, want 1", n)
		}
	})
}

// With near caches, every process stops serving an invalidated value once
// the record's invalidation reaches it, and a soft invalidation makes the
// near copy stale.
func TestInvalidateTag_near(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		if s.Kind == redistest.Miniredis {
			t.Skip("miniredis has no CLIENT TRACKING: no near cache")
		}
		ctx := testCtx(t)
		opts := nearOpts(t)
		a := nearCache(t, s, opts)
		b := nearCache(t, s, opts)
		var calls atomic.Int64
		tags := cache.WithTags("near")
		if v, err := cache.GetOrLoad(ctx, a, "k", versioned(&calls), tags); err != nil || v != "v1" {
			t.Fatalf("first load = %q, %v", v, err)
		}
		for range 3 { // fills b's near cache with the value and the record
			if v, err := cache.GetOrLoad(ctx, b, "k", versioned(&calls), tags); err != nil || v != "v1" {
				t.Fatalf("b = %q, %v", v, err)
			}
		}
		if st := b.Stats(); st.NearHits < 1 {
			t.Fatalf("b's NearHits = %d, want the value and its record served from memory", st.NearHits)
		}
		before := b.Stats().NearInvalidations
		if err := a.SoftInvalidateTag(ctx, "near"); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, ctx, "b hears of the record", func() bool { return b.Stats().NearInvalidations > before })
		if v, err := cache.Get[string](ctx, b, "k"); !errors.Is(err, cache.ErrStale) || v != "v1" {
			t.Fatalf("b after SoftInvalidateTag = %q, %v; want v1, ErrStale", v, err)
		}
		before = b.Stats().NearInvalidations
		if err := a.InvalidateTag(ctx, "near"); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, ctx, "b hears of the record again", func() bool { return b.Stats().NearInvalidations > before })
		if _, err := cache.Get[string](ctx, b, "k"); !errors.Is(err, cache.ErrMiss) {
			t.Fatalf("b after InvalidateTag: Get = %v, want ErrMiss (a hard invalidation wins over a soft one)", err)
		}
		// In the process that invalidated, at once (read-your-writes).
		if err := a.InvalidateTag(ctx, "near"); err != nil {
			t.Fatal(err)
		}
		if _, err := cache.Get[string](ctx, a, "k"); !errors.Is(err, cache.ErrMiss) {
			t.Fatalf("a after its own InvalidateTag: Get = %v, want ErrMiss", err)
		}
	})
}

// A record that is gone (evicted, expired, lost in a failover) reads as
// an invalidation at a time nobody knows: the value is loaded again.
func TestTags_recordGone(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		c := newCacheOn(t, s.Client(t), &cache.Options{Namespace: ns})
		var calls atomic.Int64
		if err := cache.Set(ctx, c, "k", "set", cache.WithTags("gone")); err != nil {
			t.Fatal(err)
		}
		if v, err := cache.Get[string](ctx, c, "k"); err != nil || v != "set" {
			t.Fatalf("Get after Set = %q, %v", v, err)
		}
		if n, err := s.Client(t).Del(ctx, recordKey(ns, "gone")).Result(); err != nil || n != 1 {
			t.Fatalf("DEL of the record = %d, %v; want 1 (is the record where the docs say?)", n, err)
		}
		if v, err := cache.GetOrLoad(ctx, c, "k", versioned(&calls), cache.WithTags("gone")); err != nil || v != "v1" {
			t.Fatalf("after the record went: %q, %v; want a new load", v, err)
		}
	})
}

// GetOrLoadMany stores each value with the call's tags, and an
// invalidation makes the batch load them again, in one loader call.
func TestTags_getOrLoadMany(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c := newCacheOn(t, s.Client(t), &cache.Options{Namespace: namespace(t)})
		var batches atomic.Int64
		load := func(_ context.Context, keys []string) (map[string]string, error) {
			n := batches.Add(1)
			out := map[string]string{}
			for _, k := range keys {
				out[k] = fmt.Sprintf("%s@%d", k, n)
			}
			return out, nil
		}
		keys := []string{"a", "b", "c", "d"}
		tags := cache.WithTags("batch")
		got, err := cache.GetOrLoadMany(ctx, c, keys, load, tags)
		if err != nil || got["c"] != "c@1" {
			t.Fatalf("first batch = %v, %v", got, err)
		}
		if err := c.InvalidateTag(ctx, "batch"); err != nil {
			t.Fatal(err)
		}
		got, err = cache.GetOrLoadMany(ctx, c, keys, load, tags)
		if err != nil || len(got) != 4 {
			t.Fatalf("after InvalidateTag = %v, %v", got, err)
		}
		for _, k := range keys {
			if got[k] == k+"@1" {
				t.Errorf("%s = %s: an invalidated value was served", k, got[k])
			}
		}
		got, err = cache.GetOrLoadMany(ctx, c, keys, load, tags)
		for _, k := range keys {
			if err != nil || got[k] != k+"@2" {
				t.Fatalf("third batch = %v, %v; want the values of the one reload", got, err)
			}
		}
		if n := batches.Load(); n != 2 {
			t.Errorf("batch loads = %d, want 2 (the first and one after the invalidation)", n)
		}
	})
}

// Bad tags and lifetimes are refused with an error naming them, before
// any server call.
func TestTags_invalid(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	c := newCacheOn(t, s.Client(t), nil)
	many := make([]string, 65)
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	for _, tt := range []struct {
		name string
		err  error
		want string
	}{
		{"empty tag", cache.Set(ctx, c, "k", 1, cache.WithTags("")), "WithTags: an empty tag"},
		{"too many", cache.Set(ctx, c, "k", 1, cache.WithTags(many...)), "WithTags: 65 tags, more than 64"},
		{"too long", cache.Set(ctx, c, "k", 1, cache.WithTags(strings.Repeat("x", 1025))), "a tag of 1025 bytes"},
		{"invalidate empty", c.InvalidateTag(ctx, "ok", ""), "InvalidateTag: an empty tag"},
		{"soft empty", c.SoftInvalidateTag(ctx, ""), "SoftInvalidateTag: an empty tag"},
	} {
		if !errors.Is(tt.err, lock.ErrInvalid) || !strings.Contains(fmt.Sprint(tt.err), tt.want) {
			t.Errorf("%s: %v, want lock.ErrInvalid saying %q", tt.name, tt.err, tt.want)
		}
	}
	if _, err := cache.GetOrLoad(ctx, c, "k", versioned(new(atomic.Int64)), cache.WithTags("")); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("GetOrLoad with an empty tag: %v, want lock.ErrInvalid", err)
	}
	if _, err := cache.New(s.Client(t), &cache.Options{TagLifetime: 500 * time.Millisecond}); !errors.Is(err, lock.ErrInvalid) || !strings.Contains(err.Error(), "TagLifetime") {
		t.Errorf("TagLifetime 500ms: %v, want lock.ErrInvalid naming TagLifetime", err)
	}
	// Repeats count once.
	same := make([]string, 100)
	for i := range same {
		same[i] = "x"
	}
	if err := cache.Set(ctx, c, "k", 1, cache.WithTags(same...)); err != nil {
		t.Errorf("100 times one tag: %v, want it counted once", err)
	}
}

// recordFail fails the GETs of tag records, while on, as a server that
// cannot answer for a moment (LOADING, a timeout) would.
type recordFail struct{ on atomic.Bool }

func (h *recordFail) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *recordFail) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *recordFail) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() && cmd.Name() == "get" && strings.Contains(fmt.Sprint(cmd.Args()[1]), ":{tag ") {
			err := errors.New("LOADING Redis is loading the dataset in memory")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// A value whose tag's record the server fails to answer for is not
// served, and not deleted either: a failed read is no evidence of an
// invalidation. A load replaces it under the rebuild lock, as a value
// nobody can use, while it stays stored for the processes that can read
// the record.
func TestTags_recordUnreadable(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		a := newCacheOn(t, s.Client(t), &cache.Options{Namespace: ns})
		fail := &recordFail{}
		b := newCacheOn(t, hookedClient(t, s, fail), &cache.Options{Namespace: ns})
		if err := cache.Set(ctx, a, "k", "old", cache.WithTags("t")); err != nil {
			t.Fatal(err)
		}
		fail.on.Store(true)
		if _, err := cache.Get[string](ctx, b, "k"); !errors.Is(err, cache.ErrMiss) || !strings.Contains(err.Error(), "could not be read") {
			t.Fatalf("Get with the record unreadable = %v, want ErrMiss saying the records could not be read", err)
		}
		started := make(chan struct{})
		release, open := gate(t)
		got := make(chan result[string], 1)
		go func() {
			v, err := cache.GetOrLoad(ctx, b, "k", heldLoader(started, release, "new"), cache.WithTags("t"))
			got <- result[string]{v, err}
		}()
		redistest.Recv(t, ctx, started, "the load")
		if v, err := cache.Get[string](ctx, a, "k"); err != nil || v != "old" {
			t.Fatalf("during the load, in a process that reads the record: %q, %v; want the value still stored", v, err)
		}
		open()
		if r := redistest.Recv(t, ctx, got, "the load's answer"); r.err != nil || r.v != "new" {
			t.Fatalf("GetOrLoad = %q, %v; want new", r.v, r.err)
		}
		fail.on.Store(false)
		redistest.WaitFor(t, ctx, "the load stored", func() bool {
			v, err := cache.Get[string](ctx, b, "k")
			return err == nil && v == "new"
		})
	})
}
