package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// fenceDraw is one acquisition: its number and when it was sent and
// returned.
type fenceDraw struct {
	fence      int64
	sent, done time.Time
}

// TestLock_Fence_sentinelLaggingReplica: a Sentinel failover promotes a
// replica that had not received the last acquisitions (its replication
// link broke, the master went on acknowledging, then hung and died). The
// lock a holder took on the old master is lost with it, and another
// process obtains the key from the promoted replica: the limit
// docs/locks.md states (a failover to a replica that had not received the lock can let a
// second holder in). What the library promises there is that fencing
// numbers keep growing across the failover, the lost ones included, as long
// as the promoted replica's clock is not behind its old master's (here
// both run on one host): so a fenced store accepts the new holder's write
// and refuses the old holder's late one, and the old holder cannot release
// the new holder's lock. Acquisitions also run in a loop through the
// failover, alternating between two processes' clients; each began after
// the one before returned, so each must draw a larger number, and the
// store, written by each holder, must refuse none of them.
func TestLock_Fence_sentinelLaggingReplica(t *testing.T) {
	redistest.Long(t)
	for _, kind := range []redistest.Kind{redistest.Redis8, redistest.Valkey} {
		t.Run(string(kind), func(t *testing.T) {
			s := redistest.StartSentinel(t, kind)
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			newLocks := func() *lock.Client {
				c, err := lock.New(s.Client(t), nil)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			a, b := newLocks(), newLocks() // two processes
			key, looped := redistest.Key(t, "held"), redistest.Key(t, "looped")
			from, err := s.Master(ctx)
			if err != nil {
				t.Fatal(err)
			}

			// The loop: a then b, each acquisition released before the next.
			var (
				mu       sync.Mutex
				draws    []fenceDraw
				loopErrs int
			)
			loopStore := &fencedStore{} // fenceReadsAndWrites
			lctx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Go(func() {
				for i := 0; lctx.Err() == nil; i++ {
					c := a
					if i%2 == 1 {
						c = b
					}
					sent := time.Now()
					l, err := c.Obtain(lctx, looped, time.Second, lock.WithFencing())
					if err != nil {
						// The master away, or the key still held by an
						// acquisition whose release the failover lost.
						mu.Lock()
						loopErrs++
						mu.Unlock()
						continue
					}
					mu.Lock()
					draws = append(draws, fenceDraw{l.Fence(), sent, time.Now()})
					mu.Unlock()
					loopStore.write(l.Fence(), i)
					_ = l.Release(lctx)
				}
			})
			drawn := func() int {
				mu.Lock()
				defer mu.Unlock()
				return len(draws)
			}
			redistest.WaitFor(t, ctx, "acquisitions before the lag", func() bool { return drawn() >= 5 })

			// The replication link breaks; the master goes on.
			replica, err := s.Lag(ctx)
			if err != nil {
				t.Fatal(err)
			}
			lagged := drawn()
			store := &fencedStore{}
			h1, err := a.Obtain(ctx, key, time.Minute, lock.WithFencing())
			if err != nil {
				t.Fatal(err)
			}
			if !store.write(h1.Fence(), 1) {
				t.Fatalf("the store refused the first holder's write (fence %d)", h1.Fence())
			}
			redistest.WaitFor(t, ctx, "acquisitions the replica lacks", func() bool { return drawn() >= lagged+5 })
			rrc := redis.NewClient(&redis.Options{Addr: replica})
			t.Cleanup(func() { _ = rrc.Close() })
			if n, err := rrc.Exists(ctx, key).Result(); err != nil || n != 0 {
				t.Fatalf("EXISTS %s on the replica = %d, %v; want 0: the replica is not lagging", key, n, err)
			}

			// The master hangs and dies; the lagging replica is promoted.
			paused := time.Now()
			if err := s.Pause(from); err != nil {
				t.Fatal(err)
			}
			to, err := s.WaitSwitch(ctx, from)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Kill(from); err != nil {
				t.Fatal(err)
			}
			if to != replica {
				t.Fatalf("promoted %s; want the lagging replica %s", to, replica)
			}
			switched := time.Now()

			// Another process obtains the key: the lock h1 holds was lost.
			var h2 *lock.Lock
			for h2 == nil {
				if h2, err = b.Obtain(ctx, key, time.Minute, lock.WithFencing()); err != nil {
					if errors.Is(err, lock.ErrNotObtained) || ctx.Err() != nil {
						t.Fatalf("Obtain on the promoted replica: %v; want the lock (h1's was lost with the old master)", err)
					}
					h2 = nil // the client has not reached the new master yet
				}
			}
			if h2.Fence() <= h1.Fence() {
				t.Errorf("fence %d drawn on the promoted replica, not above %d, drawn on the old master before it died", h2.Fence(), h1.Fence())
			}
			if !store.write(h2.Fence(), 2) {
				t.Errorf("the store refused the new holder's write (fence %d; the largest accepted %d)", h2.Fence(), h1.Fence())
			}
			if store.write(h1.Fence(), 3) {
				t.Errorf("the store accepted the old holder's late write (fence %d) after the new holder's (fence %d)", h1.Fence(), h2.Fence())
			}
			if err := h1.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("the old holder's Release = %v; want ErrNotHeld (the key is the new holder's)", err)
			}
			if err := h2.Refresh(ctx, time.Minute); err != nil {
				t.Errorf("the new holder's Refresh after the old holder's Release: %v", err)
			}

			// The loop goes on past the switch.
			after := drawn()
			redistest.WaitFor(t, ctx, "acquisitions after the promotion", func() bool { return drawn() >= after+5 })
			stop()
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			_, _, rejected, _ := loopStore.counts()
			down, before, lost := 0, 0, 0
			for i, d := range draws {
				switch {
				case d.done.Before(paused) && i < lagged:
					before++
				case d.done.Before(paused):
					lost++
				case d.sent.After(switched):
				default:
					down++
				}
				if i > 0 && d.fence <= draws[i-1].fence {
					t.Errorf("acquisition %d drew %d, not above %d, drawn by the one before it", i, d.fence, draws[i-1].fence)
				}
			}
			t.Logf("%d acquisitions in the loop (%d replicated, %d on the old master after the link broke, lost with it, %d around the switch, %d after it; %d attempts failed); the store refused %d of them; fences %d (h1, lost) then %d (h2, on the promoted replica, %v later)",
				len(draws), before, lost, down, len(draws)-before-lost-down, loopErrs, rejected, h1.Fence(), h2.Fence(), time.Duration(h2.Fence()-h1.Fence())*time.Microsecond)
			if rejected > 0 {
				t.Errorf("the store refused %d writes of holders in the loop: a later acquisition drew a smaller number", rejected)
			}
		})
	}
}
