package gocronlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-co-op/gocron/v2"
	"github.com/hotkv/stampede/gocronlock"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// Two instances reach the same tick; the first runs the job and unlocks at
// once, yet the lock is kept for the rest of MinHold, so the second (its
// clock a little behind) skips the tick. In a service the Locker is passed
// to gocron.NewScheduler with gocron.WithDistributedLocker.
func Example() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()
	instance := func(name string) *gocronlock.Locker {
		c, err := lock.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), nil)
		if err != nil {
			panic(err)
		}
		l, err := gocronlock.New(c, &gocronlock.Options{MinHold: 50 * time.Second, Metadata: name})
		if err != nil {
			panic(err)
		}
		return l
	}
	a, b := instance("a"), instance("b")
	ctx := context.Background()

	h, err := a.Lock(ctx, "report") // gocron passes the job's name
	fmt.Println("a runs the job:", err == nil)
	fmt.Println("a unlocks:", h.Unlock(ctx))
	_, err = b.Lock(ctx, "report")
	fmt.Println("b skips the tick:", errors.Is(err, lock.ErrNotObtained))
	fmt.Println("lock kept for the rest of MinHold:", mr.TTL("gocron:report") > 0)

	mr.FastForward(time.Minute) // the next tick
	h, err = b.Lock(ctx, "report")
	fmt.Println("next tick, b runs the job:", err == nil)
	_ = h.Unlock(ctx)
	// Output:
	// a runs the job: true
	// a unlocks: <nil>
	// b skips the tick: true
	// lock kept for the rest of MinHold: true
	// next tick, b runs the job: true
}

func report() { fmt.Println("report") }

// The snippet of docs/locks.md (docs_test.go checks it): one schedule on
// every replica, each tick run by one. Compiled, not run: it connects to a
// server on localhost:6379.
func Example_scheduler() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locks, err := lock.New(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	hostname, _ := os.Hostname()
	locker, err := gocronlock.New(locks, &gocronlock.Options{
		MinHold:  50 * time.Second, // most of the job's interval
		Metadata: hostname,         // who ran it, for locks.Inspect
	})
	if err != nil {
		log.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	_, err = s.NewJob(gocron.DurationJob(time.Minute), gocron.NewTask(report),
		gocron.WithName("report")) // the key: "gocron:report" (Options.Prefix)
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
}
