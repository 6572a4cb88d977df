package lock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// TestCluster_killedMasterSlotMap: on a Cluster whose master of the key is
// killed (SIGKILL) and replaced by its promoted replica, Obtain works
// again soon after the promotion: a transport error makes the client
// reload its slot map, rather than fail until go-redis refreshes it on its
// own (a minute).
func TestCluster_killedMasterSlotMap(t *testing.T) {
	const nodeTimeout = 500 * time.Millisecond
	s := redistest.StartClusterWithReplica(t, nodeTimeout)
	stalls := redistest.MeasureStalls(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.Addrs()})
	t.Cleanup(func() { redistest.WaitDialsEnd(t) }) // runs after rc.Close
	t.Cleanup(func() { _ = rc.Close() })
	locks, err := lock.New(rc, nil)
	if err != nil {
		t.Fatal(err)
	}

	// A key whose slot the first master (the one killed) owns.
	var key string
	for i := 0; key == ""; i++ {
		k := redistest.Key(t, strconv.Itoa(i))
		m, err := rc.MasterForKey(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == s.Addrs()[0] {
			key = k
		}
	}
	l, err := locks.Obtain(ctx, key, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	killed := time.Now()
	s.KillNode(0)
	if err := s.WaitMaster(ctx, 3); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()

	// The bound, from the end of the first call that began after the
	// promotion (go-redis's own retries on the dead node can take it
	// seconds): the library's reload interval (a second) and one more for
	// go-redis's reload (it may try the dead node first, and waits 200 ms
	// between reloads), two node timeouts for the other masters to learn
	// of the promotion, and whatever the scheduler took from this process.
	bound := 2*time.Second + 2*nodeTimeout
	var firstEnd time.Time
	failures := 0
	for {
		began := time.Now()
		l, err := locks.Obtain(ctx, key, time.Minute)
		now := time.Now()
		if firstEnd.IsZero() {
			firstEnd = now
			t.Logf("the first Obtain after the promotion took %v: %v", now.Sub(began).Round(time.Millisecond), err)
		}
		if err == nil {
			t.Logf("promoted %v after the kill; Obtain succeeded %v after the promotion, after %d failures",
				promoted.Sub(killed).Round(time.Millisecond), now.Sub(promoted).Round(time.Millisecond), failures)
			if err := l.Release(ctx); err != nil {
				t.Error(err)
			}
			return
		}
		failures++
		if now.Sub(firstEnd) > bound+stalls.Within(firstEnd, now) {
			t.Fatalf("Obtain still fails %v after the replica was promoted (%v after the kill, %d failures): %v",
				now.Sub(promoted).Round(time.Millisecond), now.Sub(killed).Round(time.Millisecond), failures, err)
		}
		time.Sleep(10 * time.Millisecond) // a retry interval: there is no signal for a slot map
	}
}
