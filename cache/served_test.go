package cache_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// The callers each load answered: Stats.Served, counted by every caller
// in its own process, and EventServed, the loader's process's count per
// load.

// servedEvents returns an Observer that passes on each EventServed, and
// the channel it sends them on (buffered for what a test makes).
func servedEvents() (func(cache.Event), <-chan cache.Event) {
	ch := make(chan cache.Event, 64)
	return func(e cache.Event) {
		if e.Kind == cache.EventServed {
			ch <- e
		}
	}, ch
}

// noMore fails if ch holds an event.
func noMore(tb testing.TB, ch <-chan cache.Event, who string) {
	tb.Helper()
	select {
	case e := <-ch:
		tb.Errorf("%s reported %+v, want no more EventServed", who, e)
	default:
	}
}

// N callers of one cold key in one process: one load, which answered all
// N (the one that ran it and N-1 that joined its flight).
func TestServed_oneProcess(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		obs, events := servedEvents()
		c, _ := newCache(t, s, &cache.Options{Observer: obs})
		release, open := gate(t)
		started := make(chan struct{})
		const n = 8
		results := []<-chan result[string]{goGetOrLoad(ctx, c, "k", heldLoader(started, release, "v"))}
		redistest.Recv(t, ctx, started, "the load")
		var calls atomic.Int32
		for range n - 1 {
			results = append(results, goGetOrLoad(ctx, c, "k", neverLoad[string](&calls)))
		}
		redistest.WaitFor(t, ctx, "every caller to join the flight", func() bool { return cache.Joined(c, "k") == n })
		open()
		for _, ch := range results {
			if r := redistest.Recv(t, ctx, ch, "a caller"); r.err != nil || r.v != "v" {
				t.Fatalf("caller got %q, %v", r.v, r.err)
			}
		}
		if st := c.Stats(); st.Loads != 1 || st.Served != n || st.Coalesced != n-1 || st.Misses != n {
			t.Errorf("stats %+v: want 1 load that served %d callers (%d coalesced, %d misses)", st, n, n-1, n)
		}
		if e := redistest.Recv(t, ctx, events, "EventServed"); e.Key != "k" || e.Callers != n || e.Err != nil {
			t.Errorf("EventServed %+v: want key k, %d callers, no error", e, n)
		}
		// A hit is served by the stored value, not a load.
		if v, err := cache.GetOrLoad(ctx, c, "k", neverLoad[string](&calls)); err != nil || v != "v" {
			t.Fatalf("hit = %q, %v", v, err)
		}
		if st := c.Stats(); st.Served != n || st.Hits != 1 {
			t.Errorf("after a hit: %d served, %d hits; want %d and 1", st.Served, st.Hits, n)
		}
		noMore(t, events, "the Cache")
	})
}

// Callers in three processes on one cold key: one load, and Stats summed
// over the processes count every caller once in Served; each process
// counts its own callers, and only the loader's reports an EventServed.
func TestServed_fleet(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		callers := []int{3, 4, 5} // per process
		var (
			caches []*cache.Cache
			events []<-chan cache.Event
		)
		for range callers {
			obs, ch := servedEvents()
			caches = append(caches, newCacheOn(t, s.Client(t), &cache.Options{Namespace: ns, Observer: obs}))
			events = append(events, ch)
		}
		release, open := gate(t)
		started := make(chan struct{})
		var calls atomic.Int32
		results := []<-chan result[string]{goGetOrLoad(ctx, caches[0], "k", heldLoader(started, release, "v"))}
		redistest.Recv(t, ctx, started, "process 0's load")
		for i, c := range caches {
			more := callers[i]
			if i == 0 {
				more-- // the one whose load is held
			}
			for range more {
				results = append(results, goGetOrLoad(ctx, c, "k", neverLoad[string](&calls)))
			}
		}
		for i, c := range caches {
			redistest.WaitFor(t, ctx, fmt.Sprintf("process %d's callers to join its flight", i), func() bool {
				return cache.Joined(c, "k") == callers[i] && (i == 0 || c.Stats().Waits == 1)
			})
		}
		open()
		for _, ch := range results {
			if r := redistest.Recv(t, ctx, ch, "a caller"); r.err != nil || r.v != "v" {
				t.Fatalf("caller got %q, %v", r.v, r.err)
			}
		}
		var total cache.Stats
		all := 0
		for i, c := range caches {
			st := c.Stats()
			if st.Served != uint64(callers[i]) {
				t.Errorf("process %d counted %d served, want its %d callers", i, st.Served, callers[i])
			}
			total = total.Add(st)
			all += callers[i]
		}
		if total.Loads != 1 || total.Served != uint64(all) || total.Misses != uint64(all) {
			t.Errorf("fleet %+v: want 1 load that served all %d callers", total, all)
		}
		if e := redistest.Recv(t, ctx, events[0], "EventServed"); e.Key != "k" || e.Callers != callers[0] {
			t.Errorf("EventServed %+v: want key k and process 0's %d callers", e, callers[0])
		}
		for i, ch := range events {
			noMore(t, ch, fmt.Sprintf("process %d", i))
		}
	})
}

// Stale readers during a held background refresh: the refresher's
// process counts its own in the refresh's EventServed; every process
// counts them in StaleHits; no caller is in Served (a stored value
// answered them), and the fleet ran one load.
func TestServed_staleReadersOfRefresh(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		clk := newClock()
		obs, events := servedEvents()
		base := cache.Options{Namespace: namespace(t), Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute}, Now: clk.Now}
		withObs := base
		withObs.Observer = obs
		a, b := newCacheOn(t, s.Client(t), &withObs), newCacheOn(t, s.Client(t), &base)
		if err := cache.Set(ctx, a, "k", "old"); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Minute)
		release, open := gate(t)
		started := make(chan struct{})
		var calls atomic.Int32
		stale := func(c *cache.Cache, load func(context.Context) (string, error)) {
			t.Helper()
			if v, err := cache.GetOrLoad(ctx, c, "k", load); err != nil || v != "old" {
				t.Fatalf("stale read = %q, %v", v, err)
			}
		}
		stale(a, heldLoader(started, release, "new")) // starts the refresh
		redistest.Recv(t, ctx, started, "the refresh's load")
		const more, others = 3, 2 // stale reads in a meanwhile, and in b
		for range more {
			stale(a, neverLoad[string](&calls))
		}
		for range others {
			stale(b, neverLoad[string](&calls))
		}
		open()
		if e := redistest.Recv(t, ctx, events, "the refresh's EventServed"); e.Key != "k" || e.Callers != 1+more || e.Err != nil {
			t.Errorf("EventServed %+v: want key k and the %d stale readers of its process", e, 1+more)
		}
		redistest.WaitFor(t, ctx, "b's refresh attempts to end", func() bool { return !cache.RefreshRunning(b, "k") })
		total := a.Stats().Add(b.Stats())
		if total.Loads != 1 || total.StaleHits != 1+more+others || total.Served != 0 || calls.Load() != 0 {
			t.Errorf("fleet %+v (%d stray loads): want 1 load, %d stale hits, none served by a load", total, calls.Load(), 1+more+others)
		}
		noMore(t, events, "a")
	})
}

// A batch load counts once in Loads and answers each key's callers: the
// batch's own, a GetOrLoad that joined one key's flight, and another
// process's batch that waited for the keys.
func TestServed_batch(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		obs, events := servedEvents()
		a := newCacheOn(t, s.Client(t), &cache.Options{Namespace: ns, Observer: obs})
		b := newCacheOn(t, s.Client(t), &cache.Options{Namespace: ns})
		keys := []string{"k1", "k2", "k3"}
		l := newBatchLoader("v:")
		l.gate, l.entered = make(chan struct{}), make(chan []string, 1)
		batchDone := make(chan error, 2)
		go func() {
			_, err := cache.GetOrLoadMany(ctx, a, keys, l.load)
			batchDone <- err
		}()
		redistest.Recv(t, ctx, l.entered, "a's batch load")
		var calls atomic.Int32
		joined := goGetOrLoad(ctx, a, "k1", neverLoad[string](&calls))
		redistest.WaitFor(t, ctx, "a's GetOrLoad to join k1's flight", func() bool { return cache.FlightJoined(a, "k1") == 2 })
		go func() {
			got, err := cache.GetOrLoadMany(ctx, b, keys, func(context.Context, []string) (map[string]string, error) {
				calls.Add(1)
				return nil, nil
			})
			if err == nil && len(got) != len(keys) {
				err = fmt.Errorf("b's batch got %v", got)
			}
			batchDone <- err
		}()
		redistest.WaitFor(t, ctx, "b's batch to wait for every key", func() bool { return b.Stats().Waits == uint64(len(keys)) })
		close(l.gate)
		if r := redistest.Recv(t, ctx, joined, "a's GetOrLoad"); r.err != nil || r.v != "v:k1" {
			t.Fatalf("GetOrLoad(k1) = %q, %v", r.v, r.err)
		}
		for range 2 {
			if err := redistest.Recv(t, ctx, batchDone, "a batch"); err != nil {
				t.Fatal(err)
			}
		}
		sa, sb := a.Stats(), b.Stats()
		if sa.Loads != 1 || sa.Served != 4 || sb.Loads != 0 || sb.Served != 3 || calls.Load() != 0 {
			t.Errorf("a %+v, b %+v: want a's 1 load serving a's 4 callers (3 keys, 1 joiner) and b's 3 keys", sa, sb)
		}
		want := map[string]int{"k1": 2, "k2": 1, "k3": 1}
		for range keys {
			e := redistest.Recv(t, ctx, events, "an EventServed")
			if e.Callers != want[e.Key] {
				t.Errorf("EventServed for %q: %d callers, want %d", e.Key, e.Callers, want[e.Key])
			}
			delete(want, e.Key)
		}
		noMore(t, events, "a")
	}, manyKinds...)
}

// A load's error is its callers' answer too: the fleet's callers of a
// failed load count in Served, as they would for its value.
func TestServed_loadError(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		obs, events := servedEvents()
		ns := namespace(t)
		a := newCacheOn(t, s.Client(t), &cache.Options{Namespace: ns, Observer: obs})
		b := newCacheOn(t, s.Client(t), &cache.Options{Namespace: ns})
		release, open := gate(t)
		started := make(chan struct{})
		failing := func(ctx context.Context) (string, error) {
			close(started)
			<-release
			return "", errors.New("backend down")
		}
		var calls atomic.Int32
		results := []<-chan result[string]{goGetOrLoad(ctx, a, "k", failing)}
		redistest.Recv(t, ctx, started, "a's load")
		results = append(results, goGetOrLoad(ctx, a, "k", neverLoad[string](&calls)))
		results = append(results, goGetOrLoad(ctx, b, "k", neverLoad[string](&calls)), goGetOrLoad(ctx, b, "k", neverLoad[string](&calls)))
		redistest.WaitFor(t, ctx, "the callers to join their flights", func() bool {
			return cache.Joined(a, "k") == 2 && cache.Joined(b, "k") == 2 && b.Stats().Waits == 1
		})
		open()
		for _, ch := range results {
			if r := redistest.Recv(t, ctx, ch, "a caller"); r.err == nil {
				t.Fatalf("caller got %q, want the load's error", r.v)
			}
		}
		sa, sb := a.Stats(), b.Stats()
		if sa.Loads != 1 || sa.LoadErrors != 1 || sa.Served != 2 || sb.Served != 2 || calls.Load() != 0 {
			t.Errorf("a %+v, b %+v: want 1 failed load serving 2 callers in each", sa, sb)
		}
		if e := redistest.Recv(t, ctx, events, "EventServed"); e.Callers != 2 || e.Err == nil {
			t.Errorf("EventServed %+v: want 2 callers and the load's error", e)
		}
	})
}
