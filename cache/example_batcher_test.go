package cache_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hotkv/stampede/cache"
	"github.com/redis/go-redis/v9"
)

// The background refreshes of one family of keys, falling due within a
// window in this process, sent to the batch loader together.
func ExampleBatcher() {
	mr := miniredis.NewMiniRedis() // a real program connects to its Redis instead
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	var mu sync.Mutex
	now := time.Now() // a clock the example moves on
	c, err := cache.New(rdb, &cache.Options{
		Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: time.Hour},
		Now:    func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	calls := make(chan []string, 2) // the keys of each loader call
	users, err := cache.NewBatcher(c, func(ctx context.Context, ids []string) (map[string]string, error) {
		calls <- slices.Sorted(slices.Values(ids))
		out := make(map[string]string, len(ids))
		for _, id := range ids {
			out[id] = "user " + id
		}
		return out, nil
	}, &cache.BatcherOptions{Window: time.Second, MaxKeys: 3}) // a round of three goes at once
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	ids := []string{"1", "2", "3"}
	if _, err := users.GetMany(ctx, ids); err != nil {
		panic(err)
	}
	fmt.Println("loaded", <-calls)

	mu.Lock()
	now = now.Add(2 * time.Minute) // the three are stale now
	mu.Unlock()
	for _, id := range ids {
		u, err := users.Get(ctx, id) // served stale at once; its refresh joins the round
		fmt.Println(u, err)
	}
	fmt.Println("refreshed", <-calls) // one loader call for the three
	// Output:
	// loaded [1 2 3]
	// user 1 <nil>
	// user 2 <nil>
	// user 3 <nil>
	// refreshed [1 2 3]
}

// A Batcher for users by id: GetMany and Get as GetOrLoadMany and
// GetOrLoad, and the stale users' refreshes sent to the loader together.
func Example_batcher() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	c, err := cache.New(rdb, &cache.Options{Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute}})
	if err != nil {
		log.Fatal(err)
	}
	users, err := cache.NewBatcher(c, db.LoadUsers, &cache.BatcherOptions{
		Window:  10 * time.Millisecond, // refreshes falling due within 10ms go together
		MaxKeys: 100,                   // in loader calls of at most 100 ids
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	u, err := users.Get(ctx, "42") // stale: served at once, refreshed in a round
	if err != nil {
		log.Fatal(err)
	}
	page, err := users.GetMany(ctx, []string{"1", "2", "3"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(u, page)
}
