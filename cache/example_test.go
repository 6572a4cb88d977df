package cache_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/loader"
	"github.com/redis/go-redis/v9"
)

func ExampleGetOrLoad() {
	mr := miniredis.NewMiniRedis() // a real program connects to its Redis instead
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	c, err := cache.New(rdb, &cache.Options{Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute}})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	type User struct{ Name string }
	load := func(ctx context.Context) (User, error) {
		fmt.Println("querying the database")
		return User{Name: "Ada"}, nil
	}
	ctx := context.Background()
	for range 3 {
		u, err := cache.GetOrLoad(ctx, c, "user:42", load)
		fmt.Println(u.Name, err)
	}
	// Output:
	// querying the database
	// Ada <nil>
	// Ada <nil>
	// Ada <nil>
}

func ExampleGetOrLoad_notFound() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c, _ := cache.New(rdb, &cache.Options{Expiry: cache.ExpiryPolicy{Negative: 30 * time.Second}})
	defer c.Close()

	lookups := 0
	load := func(ctx context.Context) (string, error) {
		lookups++
		return "", loader.ErrNotFound // remembered for Expiry.Negative
	}
	for range 2 {
		_, err := cache.GetOrLoad(context.Background(), c, "sku:missing", load)
		fmt.Println(errors.Is(err, loader.ErrNotFound))
	}
	fmt.Println("lookups:", lookups)
	// Output:
	// true
	// true
	// lookups: 1
}

// Totals over several Caches, e.g. one per namespace, or the Stats that
// each process reports. Every caller a load answered counts in Served of
// its own process (the second process's 5 waited for the first's load),
// so the sum gives the fleet's callers per load.
func ExampleStats_Add() {
	perProcess := []cache.Stats{
		{Hits: 90, Misses: 10, Loads: 1, Served: 10, Coalesced: 9},
		{Hits: 95, Misses: 5, Served: 5, Coalesced: 4, Waits: 1},
	}
	var total cache.Stats
	for _, s := range perProcess {
		total = total.Add(s)
	}
	fmt.Printf("hits %d, misses %d, loads %d, callers per load %d\n", total.Hits, total.Misses, total.Loads, total.Served/total.Loads)
	// Output: hits 185, misses 15, loads 1, callers per load 15
}

// An Observer hears, once per load, how many calls of its process the
// load answered (EventServed); Stats.Served counts them too, and, in
// other processes, the calls that waited for it.
func ExampleEvent_served() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	c, err := cache.New(rdb, &cache.Options{Observer: func(e cache.Event) {
		if e.Kind == cache.EventServed {
			fmt.Printf("the load of %s answered %d call(s) here\n", e.Key, e.Callers)
		}
	}})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	load := func(context.Context) (string, error) { return "Ada", nil }
	for range 3 { // a miss and its load, then two hits
		if _, err := cache.GetOrLoad(context.Background(), c, "user:42", load); err != nil {
			panic(err)
		}
	}
	st := c.Stats()
	fmt.Printf("served by a load %d, hits %d\n", st.Served, st.Hits)
	// Output:
	// the load of user:42 answered 1 call(s) here
	// served by a load 1, hits 2
}

// A loader wrapped with loader.WithRetry rides out a transient failure; the
// waiters of that load see only its success.
func ExampleGetOrLoad_retry() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c, _ := cache.New(rdb, &cache.Options{Expiry: cache.ExpiryPolicy{Fresh: time.Minute}})
	defer c.Close()

	calls := 0
	query := func(ctx context.Context) (string, error) {
		calls++
		if calls == 1 {
			return "", errors.New("connection reset")
		}
		return "Ada", nil
	}
	load := loader.WithRetry(query, &loader.RetryOptions{Attempts: 3, Backoff: 10 * time.Millisecond})

	v, err := cache.GetOrLoad(context.Background(), c, "user:42", load)
	fmt.Println(v, err, "after", calls, "calls")
	// Output: Ada <nil> after 2 calls
}

func ExampleSet() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c, _ := cache.New(rdb, &cache.Options{Expiry: cache.ExpiryPolicy{Fresh: time.Minute}})
	defer c.Close()
	ctx := context.Background()

	// e.g. after an update, store the new value instead of waiting for a load
	fmt.Println(cache.Set(ctx, c, "user:42", "Ada Lovelace"))
	name, err := cache.Get[string](ctx, c, "user:42")
	fmt.Println(name, err)

	fmt.Println(c.Delete(ctx, "user:42"))
	_, err = cache.Get[string](ctx, c, "user:42")
	fmt.Println(errors.Is(err, cache.ErrMiss))
	// Output:
	// <nil>
	// Ada Lovelace <nil>
	// <nil>
	// true
}

// After the data behind some values changed, but serving them a little
// longer is fine: SoftInvalidate marks them stale instead of removing
// them. Readers get them at once, as stale values, while one GetOrLoad in
// the whole cluster loads each again.
func ExampleCache_SoftInvalidate() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c, _ := cache.New(rdb, &cache.Options{Expiry: cache.ExpiryPolicy{Fresh: time.Hour}})
	defer c.Close()
	ctx := context.Background()

	_ = cache.Set(ctx, c, "price:1", 10)
	_ = cache.Set(ctx, c, "price:2", 20)
	fmt.Println(c.SoftInvalidate(ctx, "price:1", "price:2"))
	for _, key := range []string{"price:1", "price:2"} {
		price, err := cache.Get[int](ctx, c, key)
		fmt.Println(key, price, errors.Is(err, cache.ErrStale))
	}
	// Output:
	// <nil>
	// price:1 10 true
	// price:2 20 true
}

// One value with its own lifetime, in place of the Cache's ExpiryPolicy:
// a Set, or a GetOrLoad's load, given WithExpiry.
func ExampleWithExpiry() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c, _ := cache.New(rdb, &cache.Options{Expiry: cache.ExpiryPolicy{Fresh: time.Minute}})
	defer c.Close()
	ctx := context.Background()

	// Fresh for an hour, then served stale for a day while one process
	// reloads it; the server drops it after both.
	long := cache.WithExpiry(cache.Expiry{Fresh: time.Hour, Stale: 24 * time.Hour})
	fmt.Println(cache.Set(ctx, c, "config", "v1", long))
	fmt.Println(rdb.PTTL(ctx, "stampede:{config}").Val())

	v, err := cache.GetOrLoad(ctx, c, "rates", func(context.Context) (string, error) { return "1.08", nil }, long)
	fmt.Println(v, err, rdb.PTTL(ctx, "stampede:{rates}").Val())
	// Output:
	// <nil>
	// 25h0m0s
	// 1.08 <nil> 25h0m0s
}

func ExampleNear() {
	mr := miniredis.NewMiniRedis() // a real program connects to its Redis, Valkey or Cluster
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()

	// Hits are answered in this process, and an entry leaves every
	// process's near cache when its value changes on the server.
	c, err := cache.New(rdb, &cache.Options{
		Expiry: cache.ExpiryPolicy{Fresh: time.Minute},
		Near:   &cache.Near{MaxEntries: 100_000, MaxBytes: 64 << 20},
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	load := func(ctx context.Context) (string, error) { return "Ada", nil }
	for range 2 {
		name, err := cache.GetOrLoad(ctx, c, "user:42:name", load)
		fmt.Println(name, err)
	}
	// miniredis has no CLIENT TRACKING, so here every read goes to the
	// server; on Redis >= 6 or Valkey, NearActive reports true and the
	// second call is a near hit (Stats.NearHits).
	fmt.Println("near cache active:", c.NearActive())
	// Output:
	// Ada <nil>
	// Ada <nil>
	// near cache active: false
}

func ExampleGetOrLoadMany() {
	mr := miniredis.NewMiniRedis() // a real program connects to its Redis instead
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c, err := cache.New(rdb, &cache.Options{Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Negative: 30 * time.Second}})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	// One query for every id not cached yet; ids it does not return are
	// not found (remembered for Expiry.Negative).
	load := func(ctx context.Context, ids []string) (map[string]string, error) {
		fmt.Println("SELECT … WHERE id IN", ids)
		rows := map[string]string{}
		for _, id := range ids {
			if id != "user:3" {
				rows[id] = "name of " + id
			}
		}
		return rows, nil
	}
	ctx := context.Background()
	for _, ids := range [][]string{{"user:1", "user:2", "user:3"}, {"user:1", "user:2", "user:3", "user:4"}} {
		users, err := cache.GetOrLoadMany(ctx, c, ids, load)
		var failed *cache.BatchError
		if errors.As(err, &failed) {
			fmt.Println("failed:", failed.Errors) // the other keys are in users
		}
		fmt.Println(len(users), users["user:1"], err)
	}
	// Output:
	// SELECT … WHERE id IN [user:1 user:2 user:3]
	// 2 name of user:1 <nil>
	// SELECT … WHERE id IN [user:4]
	// 3 name of user:1 <nil>
}

// The snippets of README.md and docs/ below are these Examples' bodies
// (docs_test.go checks it). They are compiled, not run: they connect to a
// server on localhost:6379.

type User struct {
	ID   int
	Name string
}

type userDB struct{}

func (userDB) LoadUser(ctx context.Context, id int) (User, error) { return User{ID: id}, ctx.Err() }

func (userDB) LoadUsers(ctx context.Context, ids []string) (map[string]User, error) {
	return map[string]User{}, ctx.Err()
}

var db userDB

// A read-through cache: GetOrLoad, Set, Delete, Get.
func Example_getOrLoad() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"}) // or a ClusterClient
	c, err := cache.New(rdb, &cache.Options{
		Expiry: cache.ExpiryPolicy{
			Fresh: time.Minute,      // fresh for
			Stale: 10 * time.Minute, // then served stale while one process refreshes
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()

	u, err := cache.GetOrLoad(ctx, c, "user:42", func(ctx context.Context) (User, error) {
		return db.LoadUser(ctx, 42) // runs once per key across all processes
	})
	switch {
	case errors.Is(err, loader.ErrNotFound): // remembered for Expiry.Negative, if set
	case errors.Is(err, cache.ErrWaitTimeout): // another process took longer than WaitTimeout
	}

	// Write-through (wakes waiters); invalidate (a rebuild in flight does
	// not write over it); read without loading (ErrMiss, or the value with
	// ErrStale if stale).
	if err := cache.Set(ctx, c, "user:42", u); err != nil {
		log.Print(err)
	}
	if err := c.Delete(ctx, "user:42"); err != nil {
		log.Print(err)
	}
	v, err := cache.Get[User](ctx, c, "user:42")
	fmt.Println(v, err, c.Stats()) // hits, stale hits, misses (Get counts too), loads, waits, ...
}

// A coherent near cache in front of the server.
func Example_near() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	c, err := cache.New(rdb, &cache.Options{
		Expiry: cache.ExpiryPolicy{Fresh: time.Minute},
		Near:   &cache.Near{MaxEntries: 100_000, MaxBytes: 64 << 20}, // Lease: 1s by default
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

// Many keys in a few round trips, with one loader call.
func Example_batch() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	c, err := cache.New(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	ids := []string{"1", "2", "3"}
	ctx := context.Background()

	users, err := cache.GetOrLoadMany(ctx, c, ids, func(ctx context.Context, ids []string) (map[string]User, error) {
		return db.LoadUsers(ctx, ids) // one query for the ids no process has cached or is loading
	})
	var failed *cache.BatchError
	switch {
	case errors.As(err, &failed): // failed.Errors[id] for each id that failed; users has the others
	case err != nil: // ErrInvalid, ErrClosed, or ctx ended: users is nil
	}
	fmt.Println(users)
}

// A service caps its loads from the orders database at 8 at once across
// all its processes, and from the search API at 2; every process gives
// the same caps. A load that finds no permit free within its WaitTimeout
// fails with ErrBackendBusy instead of piling onto the backend.
func ExampleWithBackend() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	c, err := cache.New(rdb, &cache.Options{
		Backends: map[string]int{"orders-db": 8, "search": 2},
		Backend:  "orders-db", // loads that name no backend
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx := context.Background()
	order, err := cache.GetOrLoad(ctx, c, "order:7", func(ctx context.Context) (string, error) {
		return "7 books", nil // runs holding one of orders-db's 8 permits
	})
	fmt.Println(order, err)
	hits, err := cache.GetOrLoad(ctx, c, "search:go", func(ctx context.Context) (int, error) {
		return 42, nil // one of search's 2 permits
	}, cache.WithBackend("search"))
	fmt.Println(hits, err)
	if errors.Is(err, cache.ErrBackendBusy) {
		log.Print("search is saturated: serve without it")
	}
	// Output:
	// 7 books <nil>
	// 42 <nil>
}
