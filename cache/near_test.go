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
	"github.com/redis/go-redis/v9"
)

// nearOpts returns options with a near cache, in the test's namespace.
func nearOpts(tb testing.TB) *cache.Options {
	return &cache.Options{Namespace: namespace(tb), Expiry: cache.ExpiryPolicy{Fresh: time.Minute}, Near: &cache.Near{MaxEntries: 1000}}
}

// nearCache returns a Cache with a near cache on s, with a client of its
// own (standing in for a process), once the near cache is active.
func nearCache(t *testing.T, s *redistest.Server, opts *cache.Options) *cache.Cache {
	t.Helper()
	rc := s.NewClient()
	t.Cleanup(func() { _ = rc.Close() }) // after the Cache's Close: cleanups run last first
	c := newCacheOn(t, rc, opts)
	if s.Kind == redistest.Miniredis {
		return c
	}
	redistest.WaitFor(t, testCtx(t), "near cache active", c.NearActive)
	return c
}

// settle calls get until two calls in a row are near hits with no
// invalidation between them. A process's own writes (a load's claim and
// value) are invalidated by the server too, and those invalidations may
// arrive after the next read filled the near cache, dropping it once more;
// tests that count near hits exactly start from a settled near cache.
func settle(t *testing.T, ctx context.Context, c *cache.Cache, get func()) {
	t.Helper()
	redistest.WaitFor(t, ctx, "a settled near cache", func() bool {
		before := c.Stats()
		get()
		get()
		after := c.Stats()
		return after.NearInvalidations == before.NearInvalidations && after.NearHits == before.NearHits+2
	})
}

func constLoader(v string, calls *atomic.Int64) loader.Func[string] {
	return func(context.Context) (string, error) {
		calls.Add(1)
		return v, nil
	}
}

// Hits after the first read come from the near cache, and a Set in
// another process reaches this one: it stops serving the old value.
func TestNear_hitsAndInvalidation(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		opts := nearOpts(t)
		a := nearCache(t, s, opts)
		b := nearCache(t, s, opts)
		var calls atomic.Int64
		if s.Kind == redistest.Miniredis {
			if err := cache.Set(ctx, a, "k", "v1"); err != nil {
				t.Fatal(err)
			}
		} else {
			setAndWait(t, ctx, a, b, "k", "v1")
		}
		for range 5 {
			v, err := cache.GetOrLoad(ctx, b, "k", constLoader("loaded", &calls))
			if err != nil || v != "v1" {
				t.Fatalf("GetOrLoad = %q, %v; want v1", v, err)
			}
		}
		st := b.Stats()
		if s.Kind == redistest.Miniredis {
			// No CLIENT TRACKING: the near cache stays off.
			if b.NearActive() || st.NearHits != 0 || st.Hits != 5 {
				t.Fatalf("miniredis: NearActive %v, NearHits %d, Hits %d; want off, 0, 5", b.NearActive(), st.NearHits, st.Hits)
			}
			return
		}
		// The first call reads the server and fills the near cache, the
		// other four are near hits.
		if st.NearHits != 4 || st.Hits != 5 || calls.Load() != 0 || st.NearEntries != 1 {
			t.Fatalf("NearHits %d Hits %d loads %d NearEntries %d; want 4, 5, 0, 1", st.NearHits, st.Hits, calls.Load(), st.NearEntries)
		}
		before := b.Stats().NearInvalidations
		if err := cache.Set(ctx, a, "k", "v2"); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, ctx, "b invalidated", func() bool { return b.Stats().NearInvalidations > before })
		v, err := cache.GetOrLoad(ctx, b, "k", constLoader("v3", &calls))
		if err != nil || v != "v2" {
			t.Fatalf("after Set elsewhere: GetOrLoad = %q, %v; want v2", v, err)
		}
		// Delete in a: b must load again.
		before = b.Stats().NearInvalidations
		if err := a.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, ctx, "b invalidated again", func() bool { return b.Stats().NearInvalidations > before })
		v, err = cache.GetOrLoad(ctx, b, "k", constLoader("v4", &calls))
		if err != nil || v != "v4" {
			t.Fatalf("after Delete elsewhere: GetOrLoad = %q, %v; want v4", v, err)
		}
	})
}

// Read-your-writes in one process: after Set or Delete returns, the old
// value is never served from the near cache, invalidation or not.
func TestNear_readYourWrites(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c := nearCache(t, s, nearOpts(t))
		var calls atomic.Int64
		for i := range 50 {
			want := string(rune('a' + i%26))
			if err := cache.Set(ctx, c, "k", want); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				v, err := cache.GetOrLoad(ctx, c, "k", constLoader("loaded", &calls))
				if err != nil || v != want {
					t.Fatalf("round %d: GetOrLoad = %q, %v; want %q", i, v, err, want)
				}
			}
			if err := c.Delete(ctx, "k"); err != nil {
				t.Fatal(err)
			}
			if _, err := cache.Get[string](ctx, c, "k"); !errors.Is(err, cache.ErrMiss) {
				t.Fatalf("round %d: Get after Delete: %v; want ErrMiss", i, err)
			}
		}
		if s.Kind != redistest.Miniredis && c.Stats().NearHits == 0 {
			t.Fatal("no near hits: the test did not test the near cache")
		}
	})
}

// TestNear_targetedInvalidations: a write reaches the near caches of the
// processes that read the key, and no other: a process with a near cache
// that never read the written keys is told of none of them. (With
// broadcast tracking every process was told of every write of the
// namespace.)
func TestNear_targetedInvalidations(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		opts := nearOpts(t)
		holder := nearCache(t, s, opts)
		idle := nearCache(t, s, opts)
		writer := newCacheOn(t, s.Client(t), &cache.Options{Namespace: opts.Namespace})

		// Keys in one slot, so that on a Cluster one tracking connection
		// carries every message below, in order.
		keys := sameSlot(t, s, 12)
		held, barrier, others := keys[0], keys[1], keys[2:]
		for _, k := range []string{held, barrier} {
			if err := cache.Set(ctx, writer, k, "v0"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := cache.Get[string](ctx, holder, held); err != nil {
			t.Fatal(err)
		}
		if _, err := cache.Get[string](ctx, idle, barrier); err != nil {
			t.Fatal(err)
		}
		holderBefore, idleBefore := holder.Stats().NearInvalidations, idle.Stats().NearInvalidations

		for i, k := range append([]string{held}, others...) {
			if err := cache.Set(ctx, writer, k, fmt.Sprint("v", i+1)); err != nil {
				t.Fatal(err)
			}
			if err := writer.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
		}
		// The barrier's invalidation comes after every message the
		// writes above sent this process.
		if err := cache.Set(ctx, writer, barrier, "v1"); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, ctx, "the barrier's invalidation", func() bool {
			return idle.Stats().NearInvalidations > idleBefore
		})
		redistest.WaitFor(t, ctx, "the held key's invalidation", func() bool {
			return holder.Stats().NearInvalidations > holderBefore
		})
		if got := idle.Stats().NearInvalidations - idleBefore; got != 1 {
			t.Errorf("the idle process was told of %d changes, want 1 (its own key's)", got)
		}
		if got := holder.Stats().NearInvalidations - holderBefore; got != 1 {
			t.Errorf("the holder was told of %d changes, want 1 (its key's first change)", got)
		}
		if _, err := cache.Get[string](ctx, holder, held); err == nil {
			t.Errorf("the holder still finds the deleted key")
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// sameSlot returns n keys whose entries share a hash slot (any keys on a
// single server). The slots are computed here (one key in 16,384 matches:
// asking the server for each took more than a minute on a busy machine);
// the server confirms the keys chosen.
func sameSlot(t *testing.T, s *redistest.Server, n int) []string {
	t.Helper()
	keys := []string{"k0"}
	if s.Kind != redistest.Cluster {
		for i := 1; i < n; i++ {
			keys = append(keys, fmt.Sprint("k", i))
		}
		return keys
	}
	want := cache.Slot("k0")
	for i := 1; len(keys) < n; i++ {
		if k := fmt.Sprint("k", i); cache.Slot(k) == want {
			keys = append(keys, k)
		}
	}
	rc := s.Client(t)
	ctx := testCtx(t)
	for _, k := range keys {
		if got, err := rc.ClusterKeySlot(ctx, "{"+k+"}").Result(); err != nil {
			t.Fatal(err)
		} else if got != int64(want) {
			t.Fatalf("slot of {%s} = %d, computed %d", k, got, want)
		}
	}
	return keys
}

// TestNear_clusterStateReads: on a Cluster, the near cache does not read
// the Cluster's state (CLUSTER SLOTS or SHARDS) every Lease/2; before, each
// process did so twice every Lease/2, which bench/fleet measured at 1.2 to
// 1.5 KB/s per process at the servers.
func TestNear_clusterStateReads(t *testing.T) {
	s := redistest.Shared(t, redistest.Cluster)
	ctx := testCtx(t)
	opts := nearOpts(t)
	opts.Near.Lease = 40 * time.Millisecond
	c := nearCache(t, s, opts)
	stateReads := func() int {
		t.Helper()
		n := 0
		for _, addr := range s.Addrs() {
			rc := redis.NewClient(&redis.Options{Addr: addr})
			info, err := rc.Info(ctx, "commandstats").Result()
			_ = rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(info, "\n") {
				if strings.HasPrefix(line, "cmdstat_cluster|slots:") || strings.HasPrefix(line, "cmdstat_cluster|shards:") {
					var calls int
					if _, err := fmt.Sscanf(line[strings.Index(line, ":")+1:], "calls=%d", &calls); err != nil {
						t.Fatalf("%q: %v", line, err)
					}
					n += calls
				}
			}
		}
		return n
	}
	before := stateReads()
	// 25 leases: 50 looks at the nodes at Lease/2 (100 state reads before).
	time.Sleep(25 * opts.Near.Lease)
	if !c.NearActive() {
		t.Fatal("the near cache went off")
	}
	// Other tests' clients may read the state meanwhile; a handful at most.
	if got := stateReads() - before; got > 10 {
		t.Errorf("%d reads of the Cluster's state in 25 leases; want a few (one per %v)", got, 10*time.Second)
	}
}

// TestNear_readerConnectionKilled: the server forgets what a connection
// read when the connection ends, and with it the invalidations of those
// keys. A reader connection the server dropped (CLIENT KILL here, a reset
// or a restart of a proxy in life) empties the near cache within a
// Lease: its ping fails, go-redis closes it, and that flushes. Before,
// the old value was served until its TTL.
func TestNear_readerConnectionKilled(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		opts := nearOpts(t)
		opts.Near.Lease = 200 * time.Millisecond
		c := nearCache(t, s, opts)
		other := newCacheOn(t, s.Client(t), &cache.Options{Namespace: opts.Namespace})
		if err := cache.Set(ctx, other, "k", "v1"); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, ctx, "a near hit of v1", func() bool {
			before := c.Stats().NearHits
			v, err := cache.Get[string](ctx, c, "k")
			return err == nil && v == "v1" && c.Stats().NearHits > before
		})

		// The readers: connections with tracking on that redirect to
		// another connection.
		admin := s.Client(t)
		list, err := admin.ClientList(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		killed := 0
		for _, line := range strings.Split(list, "\n") {
			f := map[string]string{}
			for _, kv := range strings.Fields(line) {
				if k, v, ok := strings.Cut(kv, "="); ok {
					f[k] = v
				}
			}
			if strings.Contains(f["flags"], "t") && f["redir"] != "" && f["redir"] != "-1" && f["redir"] != f["id"] {
				if err := admin.Do(ctx, "CLIENT", "KILL", "ID", f["id"]).Err(); err != nil {
					t.Fatal(err)
				}
				killed++
			}
		}
		if killed == 0 {
			t.Fatalf("no reader connection in CLIENT LIST:\n%s", list)
		}
		if err := cache.Set(ctx, other, "k", "v2"); err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 20*opts.Near.Lease)
		defer cancel()
		redistest.WaitFor(t, short, "v2 in the process whose reader was killed", func() bool {
			v, err := cache.Get[string](ctx, c, "k")
			return err == nil && v == "v2"
		})
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey)
}

// TestNear_concurrentFillsKept: fills from many goroutines at once share
// the reader's one connection and are all kept. (A reader whose client
// dialled more connections, as go-redis does for pipelines and past
// PoolSize, closed the extra ones, and every close flushed the near
// cache: 676 flushes for 2,000 reads, nothing kept.)
func TestNear_concurrentFillsKept(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		opts := nearOpts(t)
		opts.Near.MaxEntries = 10000
		w := newCacheOn(t, s.Client(t), &cache.Options{Namespace: opts.Namespace, Expiry: cache.ExpiryPolicy{Fresh: time.Hour}})
		const n = 2000
		for i := range n {
			if err := cache.Set(ctx, w, fmt.Sprint("m", i), "x"); err != nil {
				t.Fatal(err)
			}
		}
		c := nearCache(t, s, opts)
		flushes := c.Stats().NearFlushes
		var wg sync.WaitGroup
		for g := range 32 {
			wg.Go(func() {
				for i := g; i < n; i += 32 {
					if _, err := cache.Get[string](ctx, c, fmt.Sprint("m", i)); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		if got := c.Stats().NearFlushes - flushes; got != 0 {
			t.Errorf("%d flushes while 32 goroutines filled the near cache; want 0", got)
		}
		hits := c.Stats().NearHits
		for i := range n {
			if _, err := cache.Get[string](ctx, c, fmt.Sprint("m", i)); err != nil {
				t.Fatal(err)
			}
		}
		if got := c.Stats().NearHits - hits; got != n {
			t.Errorf("second pass: %d of %d reads answered by the near cache", got, n)
		}
	}, redistest.Redis8, redistest.Cluster)
}

// A near hit judges freshness by Options.Now when it is set, as a read
// from the server does: an entry past its freshness by that clock is a
// stale hit that starts a refresh, though the real clock finds it fresh.
func TestNear_freshnessByOptionsNow(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		var now atomic.Int64
		now.Store(time.Now().UnixNano())
		opts := nearOpts(t)
		opts.Expiry = cache.ExpiryPolicy{Fresh: time.Minute, Stale: time.Hour}
		opts.Now = func() time.Time { return time.Unix(0, now.Load()) }
		c := nearCache(t, s, opts)
		if err := cache.Set(ctx, c, "k", "v1"); err != nil {
			t.Fatal(err)
		}
		var loads atomic.Int64
		load := constLoader("v2", &loads)
		for range 2 {
			if v, err := cache.GetOrLoad(ctx, c, "k", load); err != nil || v != "v1" {
				t.Fatalf("GetOrLoad = %q, %v; want v1", v, err)
			}
		}
		if st := c.Stats(); st.NearHits != 1 || st.Hits != 2 {
			t.Fatalf("NearHits %d, Hits %d; want the second call a near hit", st.NearHits, st.Hits)
		}
		now.Add(int64(2 * time.Minute))
		if v, err := cache.GetOrLoad(ctx, c, "k", load); err != nil || v != "v1" {
			t.Fatalf("past freshness: GetOrLoad = %q, %v; want the stale v1", v, err)
		}
		if st := c.Stats(); st.StaleHits != 1 || st.NearHits != 2 {
			t.Fatalf("past freshness: StaleHits %d, NearHits %d; want a stale near hit", st.StaleHits, st.NearHits)
		}
		redistest.WaitFor(t, ctx, "the refresh", func() bool { return loads.Load() == 1 })
	}, redistest.Redis8, redistest.Valkey)
}
