package lock_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
)

// TestClient_ObtainMany: one attempt per key, together: free keys are
// taken (and each lock works as Obtain's does), a key held by another
// lock names its holder's value, a key holding other data returns that
// data, and nothing held is changed.
func TestClient_ObtainMany(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, rc := newClient(t, s, nil)
		free := redistest.Key(t, "{m}free")
		held := redistest.Key(t, "{m}held")
		data := redistest.Key(t, "{m}data")
		other := redistest.Key(t, "other") // another slot on a Cluster
		holder, err := c.Obtain(ctx, held, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Set(ctx, data, "not a lock", 0).Err(); err != nil {
			t.Fatal(err)
		}
		tries, err := c.ObtainMany(ctx, []string{free, held, data, other}, time.Minute)
		if err != nil || len(tries) != 4 {
			t.Fatalf("ObtainMany = %d attempts, %v; want 4", len(tries), err)
		}
		for i, want := range []bool{true, false, false, true} {
			if tr := tries[i]; tr.Err != nil || (tr.Lock != nil) != want {
				t.Errorf("attempt %d: lock %v, held %q, err %v; want taken %v", i, tr.Lock != nil, tr.Held, tr.Err, want)
			}
		}
		if info, err := c.Inspect(ctx, held); err != nil || info.Token != holder.Token() {
			t.Fatalf("the held lock after ObtainMany: %+v, %v; want the holder's", info, err)
		}
		if v, _ := rc.Get(ctx, held).Result(); tries[1].Held != v {
			t.Errorf("held key: Held = %q; want the holder's value %q", tries[1].Held, v)
		}
		if tries[2].Held != "not a lock" {
			t.Errorf("data key: Held = %q; want the data", tries[2].Held)
		}
		for _, i := range []int{0, 3} {
			l := tries[i].Lock
			if info, err := c.Inspect(ctx, l.Key()); err != nil || info.Token != l.Token() {
				t.Errorf("%s: Inspect = %+v, %v; want the lock taken", l.Key(), info, err)
			}
			if err := l.Replace(ctx, "done", time.Minute); err != nil {
				t.Errorf("%s: Replace = %v", l.Key(), err)
			}
			if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("%s: Release after Replace = %v; want ErrNotHeld", l.Key(), err)
			}
		}
		// One key goes with the client's concurrent calls, as Obtain does.
		one, err := c.ObtainMany(ctx, []string{free}, time.Minute)
		if err != nil || one[0].Lock != nil || one[0].Held != "done" {
			t.Errorf("ObtainMany of one taken key = %+v, %v; want its value", one, err)
		}
	})
}

// TestClient_ObtainMany_badInput: bad arguments and an ended context
// are refused before any server call.
func TestClient_ObtainMany_badInput(t *testing.T) {
	s := redistest.Start(t, redistest.Miniredis)
	c, _ := newClient(t, s, nil)
	ctx := testCtx(t)
	if _, err := c.ObtainMany(ctx, []string{"a", ""}, time.Second); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("empty key: %v; want ErrInvalid", err)
	}
	if _, err := c.ObtainMany(ctx, []string{"a"}, time.Microsecond); !errors.Is(err, lock.ErrInvalid) {
		t.Errorf("ttl below 1ms: %v; want ErrInvalid", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.ObtainMany(done, []string{"a"}, time.Second); !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: %v; want ErrNotObtained and context.Canceled", err)
	}
	if tries, err := c.ObtainMany(ctx, nil, time.Second); err != nil || len(tries) != 0 {
		t.Errorf("no keys: %v, %v; want none", tries, err)
	}
}

// A batch job takes the locks of the invoices it can, in one round trip,
// and leaves those another worker holds.
func ExampleClient_ObtainMany() {
	rdb, stop := embedded()
	defer stop()
	ctx := context.Background()
	c, err := lock.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	other, _ := c.Obtain(ctx, "invoice:2", time.Minute) // another worker's
	defer other.Release(ctx)

	tries, err := c.ObtainMany(ctx, []string{"invoice:1", "invoice:2", "invoice:3"}, time.Minute)
	if err != nil {
		panic(err)
	}
	for i, t := range tries {
		switch {
		case t.Err != nil:
			fmt.Println(i, "failed:", t.Err)
		case t.Lock != nil:
			fmt.Println(i, "taken")
			defer t.Lock.Release(ctx)
		default:
			fmt.Println(i, "held by another")
		}
	}
	// Output:
	// 0 taken
	// 1 held by another
	// 2 taken
}

// TestClient_ReplaceMany: the locks still held are replaced by their
// values, one taken meanwhile is ErrNotHeld and left alone, and bad
// replacements are ErrInvalid without a server call for them.
func TestClient_ReplaceMany(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, rc := newClient(t, s, nil)
		other, _ := newClient(t, s, nil)
		keys := []string{redistest.Key(t, "{r}a"), redistest.Key(t, "{r}b"), redistest.Key(t, "{r}c")}
		tries, err := c.ObtainMany(ctx, keys, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Set(ctx, keys[1], "someone else", 0).Err(); err != nil {
			t.Fatal(err)
		}
		foreign, err := other.Obtain(ctx, redistest.Key(t, "{r}d"), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		errs := c.ReplaceMany(ctx, []lock.Replacement{
			{Lock: tries[0].Lock, Value: "A", TTL: time.Minute},
			{Lock: tries[1].Lock, Value: "B", TTL: time.Minute},
			{Lock: tries[2].Lock, Value: "C", TTL: time.Microsecond},
			{Lock: foreign, Value: "D", TTL: time.Minute},
		})
		if errs[0] != nil || !errors.Is(errs[1], lock.ErrNotHeld) || !errors.Is(errs[2], lock.ErrInvalid) || !errors.Is(errs[3], lock.ErrInvalid) {
			t.Fatalf("ReplaceMany = %v; want nil, ErrNotHeld, ErrInvalid, ErrInvalid", errs)
		}
		for key, want := range map[string]string{keys[0]: "A", keys[1]: "someone else"} {
			if v, err := rc.Get(ctx, key).Result(); err != nil || v != want {
				t.Errorf("%s = %q, %v; want %q", key, v, err, want)
			}
		}
		if ttl, err := rc.PTTL(ctx, keys[0]).Result(); err != nil || ttl <= 0 || ttl > time.Minute {
			t.Errorf("PTTL of the replaced key = %v, %v; want at most a minute", ttl, err)
		}
		if info, err := c.Inspect(ctx, keys[2]); err != nil || info.Token != tries[2].Lock.Token() {
			t.Errorf("the lock refused for its TTL: %+v, %v; want it still held", info, err)
		}
	})
}

// TestClient_KeepAliveMany: locks kept alive together outlive their TTL
// over several rounds; one taken meanwhile is reported once and not
// refreshed again (nor overwritten).
func TestClient_KeepAliveMany(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		var refreshed, failed atomic.Int32
		rounds := make(chan struct{}, 64)
		c, rc := newClient(t, s, &lock.Options{Observer: func(e lock.Event) {
			switch e.Kind {
			case lock.EventRefreshed:
				if refreshed.Add(1)%2 == 0 {
					rounds <- struct{}{}
				}
			case lock.EventRefreshFailed:
				failed.Add(1)
			}
		}})
		const ttl = 2 * time.Second
		keys := []string{redistest.Key(t, "{k}a"), redistest.Key(t, "{k}b"), redistest.Key(t, "{k}c")}
		tries, err := c.ObtainMany(ctx, keys, ttl)
		if err != nil {
			t.Fatal(err)
		}
		locks := []*lock.Lock{tries[0].Lock, tries[1].Lock, tries[2].Lock}
		if err := rc.Set(ctx, keys[2], "taken", 0).Err(); err != nil {
			t.Fatal(err)
		}
		stop := c.KeepAliveMany(ctx, ttl, 0, locks)
		// Four rounds of the two held locks (one every ttl/3): past
		// their first TTL.
		for range 4 {
			redistest.Recv(t, ctx, rounds, "a round of refreshes")
		}
		stop()
		for _, l := range locks[:2] {
			if info, err := c.Inspect(ctx, l.Key()); err != nil || info.Token != l.Token() {
				t.Errorf("%s after four rounds: %+v, %v; want still held", l.Key(), info, err)
			}
		}
		if v, _ := rc.Get(ctx, keys[2]).Result(); v != "taken" || failed.Load() != 1 {
			t.Errorf("the taken key holds %q after %d failed refreshes; want \"taken\", reported once", v, failed.Load())
		}
	})
}

// A batch job claims the reports it will build, keeps the claims alive
// while it builds them, and puts each report in place of its claim.
func ExampleClient_ReplaceMany() {
	rdb, stop := embedded()
	defer stop()
	ctx := context.Background()
	c, err := lock.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	tries, err := c.ObtainMany(ctx, []string{"report:1", "report:2"}, 10*time.Second)
	if err != nil {
		panic(err)
	}
	var locks []*lock.Lock
	for _, t := range tries {
		if t.Lock != nil {
			locks = append(locks, t.Lock)
		}
	}
	keep := c.KeepAliveMany(ctx, 10*time.Second, 0, locks)
	var done []lock.Replacement
	for _, l := range locks { // the long work
		done = append(done, lock.Replacement{Lock: l, Value: "built " + l.Key(), TTL: time.Hour})
	}
	keep()
	for i, err := range c.ReplaceMany(ctx, done) {
		v, _ := rdb.Get(ctx, done[i].Lock.Key()).Result()
		fmt.Println(done[i].Lock.Key(), err, v)
	}
	// Output:
	// report:1 <nil> built report:1
	// report:2 <nil> built report:2
}
