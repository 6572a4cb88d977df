package cache_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// TestCluster_announcementsCrossNodes: with Options.Broadcast, a waiter
// subscribed through a ClusterClient is woken by an announcement published
// on any node, as happens when the rebuilding process talks to another
// node (classic PUBLISH crosses the cluster bus).
func TestCluster_announcementsCrossNodes(t *testing.T) {
	s := redistest.Shared(t, redistest.Cluster)
	ctx := testCtx(t)
	ns := namespace(t)
	c, rc := newCache(t, s, &cache.Options{Namespace: ns, WaitTimeout: time.Minute, PollInterval: time.Minute, Broadcast: true})
	locks, err := lock.New(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, addr := range s.Addrs() {
		key := "k" + string(rune('a'+i))
		stored := ns + ":{" + key + "}"
		// Another process's claim on the key: GetOrLoad must wait for it.
		claim, err := locks.Obtain(ctx, stored, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			_, err := cache.GetOrLoad(ctx, c, key, func(context.Context) (string, error) {
				return "", errors.New("the waiter must not load")
			})
			got <- err
		}()
		redistest.WaitFor(t, ctx, "the waiter to wait", func() bool { return c.Stats().Waits == uint64(i+1) })
		node := redis.NewClient(&redis.Options{Addr: addr})
		err = node.Publish(ctx, ns+":announce", "e"+stored+"\x00"+claim.Token()+"\x00failed on node "+addr).Err()
		node.Close()
		if err != nil {
			t.Fatal(err)
		}
		// PollInterval is a minute: only the announcement can wake it.
		if err := <-got; !errors.Is(err, cache.ErrRemoteLoad) || !strings.Contains(err.Error(), addr) {
			t.Errorf("node %s: err = %v, want the announcement's ErrRemoteLoad", addr, err)
		}
	}
}

// TestCluster_keysShareASlot: the value and lock keys of one entry, for
// plain, long, binary and brace-containing keys, map to one slot (a
// Delete of both in one command would fail with CROSSSLOT otherwise).
func TestCluster_keysShareASlot(t *testing.T) {
	s := redistest.Shared(t, redistest.Cluster)
	ctx := testCtx(t)
	c, _ := newCache(t, s, nil)
	for _, key := range []string{"plain", strings.Repeat("long", 100), "bin\x00\xff", "{user}:1", "a}b{c"} {
		v, err := cache.GetOrLoad(ctx, c, key, func(context.Context) (string, error) { return "v:" + key, nil })
		if err != nil || v != "v:"+key {
			t.Fatalf("%q: %q, %v", key, v, err)
		}
		if err := c.Delete(ctx, key); err != nil {
			t.Errorf("Delete(%q): %v", key, err)
		}
		if _, err := cache.Get[string](ctx, c, key); !errors.Is(err, cache.ErrMiss) {
			t.Errorf("after Delete(%q): %v", key, err)
		}
	}
}

// TestGetOrLoad_lostAnnouncement: the rebuilder's value arrives without an
// announcement (lost message, subscriber reconnecting): the poll still
// wakes the waiter, which returns the value without loading.
func TestGetOrLoad_lostAnnouncement(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		c, rc := newCache(t, s, &cache.Options{Namespace: ns, WaitTimeout: time.Minute, PollInterval: 50 * time.Millisecond})
		other := newCacheOn(t, rc, &cache.Options{Namespace: ns + "x"}) // announces on another channel
		locks, err := lock.New(rc, nil)
		if err != nil {
			t.Fatal(err)
		}
		stored := ns + ":{k}"
		if _, err := locks.Obtain(ctx, stored, time.Minute); err != nil { // another process's claim
			t.Fatal(err)
		}
		got := make(chan string, 1)
		errs := make(chan error, 1)
		go func() {
			v, err := cache.GetOrLoad(ctx, c, "k", func(context.Context) (string, error) {
				return "", errors.New("the waiter must not load")
			})
			got <- v
			errs <- err
		}()
		redistest.WaitFor(t, ctx, "the waiter to wait", func() bool { return c.Stats().Waits > 0 })
		// The value appears under the key with no announcement on c's channel.
		if err := cache.Set(ctx, other, "k", "silent"); err != nil {
			t.Fatal(err)
		}
		raw, err := rc.Get(ctx, ns+"x:{k}").Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := rc.Set(ctx, stored, raw, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if v, err := <-got, <-errs; err != nil || v != "silent" {
			t.Fatalf("GetOrLoad = %q, %v; want the value found by polling", v, err)
		}
		if st := c.Stats(); st.WaitTimeouts != 0 || st.Loads != 0 {
			t.Errorf("stats %+v: want no wait timeout and no load", st)
		}
	}, redistest.Redis8, redistest.Cluster, redistest.Redis7)
}
