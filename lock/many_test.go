package lock_test

import (
	"context"
	"errors"
	"fmt"
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
