package cache_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestCluster_killedMasterSlotMap: a cache without the near cache, on a
// Cluster whose master of the key is killed (SIGKILL) and replaced by its
// promoted replica, talks to the new master soon after the promotion: a
// transport error makes it reload the client's slot map, rather than fail
// open until go-redis refreshes it on its own (a minute). After that the
// key loads about once per expiry again.
func TestCluster_killedMasterSlotMap(t *testing.T) {
	const (
		nodeTimeout = 500 * time.Millisecond
		cooldown    = 200 * time.Millisecond
		ttl         = 100 * time.Millisecond
	)
	s := redistest.StartClusterWithReplica(t, nodeTimeout)
	stalls := redistest.MeasureStalls(t)
	ctx := testCtx(t)
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.Addrs()})
	t.Cleanup(func() { redistest.WaitDialsEnd(t) }) // runs after rc.Close
	t.Cleanup(func() { _ = rc.Close() })
	ns := namespace(t)
	c := newCacheOn(t, rc, &cache.Options{Namespace: ns, TTL: ttl, FailOpenCooldown: cooldown})

	// A key whose slot the first master (the one killed) owns.
	var key string
	for i := 0; key == ""; i++ {
		k := "k" + strconv.Itoa(i)
		m, err := rc.MasterForKey(ctx, ns+":{"+k+"}")
		if err != nil {
			t.Fatal(err)
		}
		if m.Options().Addr == s.Addrs()[0] {
			key = k
		}
	}

	var loads atomic.Int64
	load := func(context.Context) (string, error) { loads.Add(1); return "v", nil }
	if _, err := cache.GetOrLoad(ctx, c, key, load); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _ = cache.GetOrLoad(ctx, c, key, load)
			}
		})
	}
	t.Cleanup(func() { close(stop); wg.Wait() })

	killed := time.Now()
	s.KillNode(0)
	if err := s.WaitMaster(ctx, 3); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()

	// Recovered: a Set succeeded and then no server call of this cache
	// failed (Stats().ServerErrors) for two cool-downs while the readers
	// ran. A Set alone is not enough: go-redis may retry it on the new
	// master (a random node) while the slot map still names the dead one.
	//
	// The bound, from the end of the first Set that began after the
	// promotion (go-redis's own retries on the dead node can take it a
	// while): a fail-open cool-down for the error that asks for the new
	// slot map and one for the call that uses it, the library's reload
	// interval (a second) and one more for go-redis's reload (it may try
	// the dead node first, and waits 200 ms between reloads), two node
	// timeouts for the other masters to learn of the promotion, and
	// whatever the scheduler took from this process.
	bound := 2*cooldown + 2*time.Second + 2*nodeTimeout
	quiet := 2 * cooldown
	var firstEnd, setAt, since time.Time
	errs := c.Stats().ServerErrors
	for {
		began := time.Now()
		err := cache.Set(ctx, c, key, "w")
		now := time.Now()
		if firstEnd.IsZero() {
			firstEnd = now
			t.Logf("the first Set after the promotion took %v: %v", now.Sub(began).Round(time.Millisecond), err)
		}
		if err == nil && setAt.IsZero() {
			setAt = now
		}
		if e := c.Stats().ServerErrors; e != errs || err != nil {
			errs, since = e, time.Time{}
		} else if since.IsZero() {
			since = now
		} else if now.Sub(since) >= quiet {
			break
		}
		if now.Sub(firstEnd) > bound+quiet+stalls.Within(firstEnd, now) {
			t.Fatalf("the cache still fails %v after the replica was promoted (%v after the kill; Set succeeded: %v), loads of the key so far %d, last Set: %v",
				now.Sub(promoted).Round(time.Millisecond), now.Sub(killed).Round(time.Millisecond), !setAt.IsZero(), loads.Load(), err)
		}
		time.Sleep(10 * time.Millisecond) // a retry interval: there is no signal for a slot map
	}
	t.Logf("promoted %v after the kill; after the promotion Set succeeded in %v, the cache stopped failing in %v; %d loads of the key until then",
		promoted.Sub(killed).Round(time.Millisecond), setAt.Sub(promoted).Round(time.Millisecond), since.Sub(promoted).Round(time.Millisecond), loads.Load())

	// From now on the key loads about once per expiry: a fail-open load
	// on every call would be hundreds.
	const expiries = 10
	from := loads.Load()
	began := time.Now()
	time.Sleep(expiries * ttl) // the window measured, not a synchronisation
	window := time.Since(began)
	got := loads.Load() - from
	want := int64(window/ttl) + 2
	t.Logf("%d loads in %v (TTL %v)", got, window.Round(time.Millisecond), ttl)
	if e := c.Stats().ServerErrors; e != errs {
		t.Errorf("%d server errors after the cache recovered", e-errs)
	}
	if got > want {
		t.Errorf("%d loads of one key in %v with a TTL of %v, want at most %d (one per expiry)", got, window.Round(time.Millisecond), ttl, want)
	}
}
