package cache_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/alicebob/miniredis/v2"
	"github.com/hotkv/stampede/cache"
	"github.com/redis/go-redis/v9"
)

// Values stored with a tag are invalidated together, in every process,
// by one write: each is loaded again by the next call that wants it.
func ExampleCache_InvalidateTag() {
	mr := miniredis.NewMiniRedis() // a real program connects to its Redis instead
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c, err := cache.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	price := 10
	load := func(ctx context.Context) (int, error) {
		fmt.Println("querying the price list")
		return price, nil
	}
	for _, sku := range []string{"price:a", "price:b"} {
		v, _ := cache.GetOrLoad(ctx, c, sku, load, cache.WithTags("pricelist"))
		fmt.Println(sku, v)
	}
	price = 12 // the price list changes: every price goes
	if err := c.InvalidateTag(ctx, "pricelist"); err != nil {
		panic(err)
	}
	v, _ := cache.GetOrLoad(ctx, c, "price:a", load, cache.WithTags("pricelist"))
	fmt.Println("price:a", v)
	// Output:
	// querying the price list
	// price:a 10
	// querying the price list
	// price:b 10
	// querying the price list
	// price:a 12
}

// A soft invalidation keeps serving the values, stale, while one refresh
// in the cluster replaces each: nobody waits for the database.
func ExampleCache_SoftInvalidateTag() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c, _ := cache.New(rdb, nil)
	defer c.Close()

	ctx := context.Background()
	if err := cache.Set(ctx, c, "menu:today", "soup", cache.WithTags("menu")); err != nil {
		panic(err)
	}
	if err := c.SoftInvalidateTag(ctx, "menu"); err != nil {
		panic(err)
	}
	v, err := cache.Get[string](ctx, c, "menu:today")
	fmt.Println(v, errors.Is(err, cache.ErrStale))
	// Output:
	// soup true
}

// Values stored with tags; one call invalidates them all, hard or soft.
func Example_tags() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	c, err := cache.New(rdb, &cache.Options{Near: &cache.Near{MaxEntries: 100_000}})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	u, err := cache.GetOrLoad(ctx, c, "user:42", func(ctx context.Context) (User, error) {
		return db.LoadUser(ctx, 42)
	}, cache.WithTags("team:7", "pricelist"))
	fmt.Println(u, err)

	// Team 7 was renamed: every value of it is loaded again when next
	// asked for (callers wait for the one load), in every process.
	_ = c.InvalidateTag(ctx, "team:7")
	// Prices changed: every value of the tag is served stale while one
	// refresh in the cluster replaces each (nobody waits).
	_ = c.SoftInvalidateTag(ctx, "pricelist")
}
