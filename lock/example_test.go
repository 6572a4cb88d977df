package lock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// embedded starts an in-process server for the examples; a real program
// connects to its Redis, Valkey or cluster instead.
func embedded() (*redis.Client, func()) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	return rdb, func() { rdb.Close(); mr.Close() }
}

func ExampleClient_Obtain() {
	rdb, stop := embedded()
	defer stop()
	ctx := context.Background()

	c, err := lock.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	l, err := c.Obtain(ctx, "invoice:42", 10*time.Second, lock.WithMetadata("worker-a"))
	if err != nil {
		panic(err)
	}
	_, err = c.Obtain(ctx, "invoice:42", 10*time.Second)
	fmt.Println("second obtain:", err)

	info, _ := c.Inspect(ctx, "invoice:42")
	fmt.Println("held by:", info.Metadata)

	fmt.Println("release:", l.Release(ctx))
	fmt.Println("release again:", l.Release(ctx))
	// Output:
	// second obtain: lock: not obtained
	// held by: worker-a
	// release: <nil>
	// release again: lock: not held
}

// A service probes the server as it starts, on a key its ACL admits, so
// that its first Obtain sends only SET NX PX.
func ExampleClient_CapabilitiesFor() {
	rdb, stop := embedded()
	defer stop()
	ctx := context.Background()

	c, err := lock.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	caps, err := c.CapabilitiesFor(ctx, "orders:")
	if err != nil {
		log.Fatal(err) // the server is down, or the ACL refuses the key
	}
	fmt.Println("release with:", caps.Release)
	// Output:
	// release with: DELEX IFEQ
}

// Many goroutines taking and freeing locks at once: a Client made on
// go-redis's automatic pipeliner streams their commands on one
// connection, about twice the lock cycles a second of the plain commands.
func ExampleNew_autoPipeline() {
	rdb, stop := embedded()
	defer stop()
	ctx := context.Background()

	ap, err := rdb.AutoPipeline() // closed with rdb
	if err != nil {
		panic(err)
	}
	c, err := lock.New(ap, nil)
	if err != nil {
		panic(err)
	}
	var wg sync.WaitGroup
	var released atomic.Int64
	for i := range 8 {
		wg.Go(func() {
			l, err := c.Obtain(ctx, fmt.Sprintf("invoice:%d", i), 10*time.Second)
			if err != nil {
				panic(err)
			}
			if l.Release(ctx) == nil {
				released.Add(1)
			}
		})
	}
	wg.Wait()
	fmt.Println("released:", released.Load())
	// Output:
	// released: 8
}

func ExampleClient_Do() {
	rdb, stop := embedded()
	defer stop()
	ctx := context.Background()
	c, _ := lock.New(rdb, nil)

	err := c.Do(ctx, "report:daily", 30*time.Second, func(ctx context.Context) error {
		// Long work goes here. The lock is refreshed every 10s meanwhile;
		// if it is lost, ctx is cancelled with cause lock.ErrLost.
		fmt.Println("building the report")
		return nil
	}, lock.WithRetry(lock.ExponentialBackoff(10*time.Millisecond, time.Second))) // wait if another instance holds it
	fmt.Println("done:", err)
	// Output:
	// building the report
	// done: <nil>
}

func ExampleClient_RunOnce() {
	rdb, stop := embedded()
	defer stop()
	ctx := context.Background()
	c, _ := lock.New(rdb, nil)

	// Every instance runs the same cron; each tick only one runs the job.
	// MinHold keeps the tick claimed for a minute even though the job is
	// fast, so an instance whose clock is behind does not run it again.
	for _, instance := range []string{"a", "b", "c"} {
		ran, err := c.RunOnce(ctx, "cron:cleanup", 10*time.Minute, func(ctx context.Context) error {
			fmt.Println("instance", instance, "cleans up")
			return nil
		}, lock.WithMinHold(time.Minute))
		fmt.Println(instance, "ran:", ran, err)
	}
	// Output:
	// instance a cleans up
	// a ran: true <nil>
	// b ran: false <nil>
	// c ran: false <nil>
}

// A store that accepts a write only with a fencing number at least as large
// as any it has seen turns away a holder whose lock expired while it was
// paused.
func ExampleLock_Fence() {
	rdb, stop := embedded()
	defer stop()
	ctx := context.Background()
	c, _ := lock.New(rdb, nil)

	highest := int64(0)
	write := func(fence int64) error {
		if fence < highest {
			return errors.New("rejected: stale fencing number")
		}
		highest = fence
		return nil
	}

	old, _ := c.Obtain(ctx, "account:7", time.Second, lock.WithFencing())
	rdb.Del(ctx, "account:7") // old's lock expires while it is paused
	next, _ := c.Obtain(ctx, "account:7", time.Second, lock.WithFencing())

	fmt.Println("new holder writes:", write(next.Fence()))
	fmt.Println("old holder wakes up and writes:", write(old.Fence()))
	// Output:
	// new holder writes: <nil>
	// old holder wakes up and writes: rejected: stale fencing number
}

// An idempotent payment: the lock on the request's idempotency key stands
// for "charging", and Replace hands the key over to the receipt in one
// step. A retry of the request finds the lock (still charging) or the
// receipt, never an empty key, and the card is charged once.
func ExampleLock_Replace() {
	rdb, stop := embedded()
	defer stop()
	ctx := context.Background()
	c, _ := lock.New(rdb, nil)

	charges := 0
	pay := func(id string) string {
		key := "payment:" + id
		l, err := c.Obtain(ctx, key, 30*time.Second)
		if errors.Is(err, lock.ErrNotObtained) {
			if _, err := c.Inspect(ctx, key); errors.Is(err, lock.ErrForeignValue) {
				receipt, _ := rdb.Get(ctx, key).Result()
				return "already paid: " + receipt
			}
			return "still charging: try again later"
		}
		if err != nil {
			return err.Error()
		}
		charges++ // charge the card
		receipt := fmt.Sprintf("receipt-%s-%d", id, charges)
		if err := l.Replace(ctx, receipt, 24*time.Hour); err != nil {
			return "charged, but the lock was lost: " + err.Error() // reconcile by hand
		}
		return "paid: " + receipt
	}

	fmt.Println(pay("A17"))
	fmt.Println(pay("A17")) // the client retries
	fmt.Println("charges:", charges)
	// Output:
	// paid: receipt-A17-1
	// already paid: receipt-A17-1
	// charges: 1
}

// A report is computed under a lock on its key, and the lock replaced by
// the report; processes that found the lock wait on the report's channel.
// The message goes out in the write's own step, and only if the write
// happened: nobody hears of a report that was not stored. The channel
// shares the key's hash tag, so on a Redis Cluster both are in one slot.
func ExampleLock_ReplaceAndPublish() {
	rdb, stop := embedded()
	defer stop()
	ctx := context.Background()
	c, _ := lock.New(rdb, nil)

	key := "report:{2026-12}"
	sub := rdb.Subscribe(ctx, key+":done") // SSubscribe, and sharded below, where the server has sharded pub/sub
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // subscribed
		log.Fatal(err)
	}

	l, err := c.Obtain(ctx, key, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	report := "revenue: 42"
	err = l.ReplaceAndPublish(ctx, report, 24*time.Hour, key+":done", report, false)
	switch {
	case errors.Is(err, lock.ErrNotPublished):
		// Stored, but the message could not go with it: send it now.
		rdb.Publish(ctx, key+":done", report)
	case err != nil:
		log.Fatal(err) // ErrNotHeld: the key moved on, nothing was stored
	}
	msg, _ := sub.ReceiveMessage(ctx)
	fmt.Println("a waiter heard:", msg.Payload)
	// Output:
	// a waiter heard: revenue: 42
}

// A hand-written watchdog, for work that cannot run inside Do: refresh
// every ttl/3 and cancel the work as soon as a refresh fails.
func ExampleLock_Refresh() {
	rdb, stop := embedded()
	defer stop()
	c, _ := lock.New(rdb, nil)

	const ttl = 3 * time.Second
	l, err := c.Obtain(context.Background(), "import:big-file", ttl)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(ttl / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if err := l.Refresh(ctx, ttl); err != nil {
					cancel(err) // lock.ErrNotHeld: someone else has it now
					return
				}
			}
		}
	}()

	fmt.Println("importing; stopped early:", ctx.Err() != nil) // the work, watching ctx
	close(done)
	cancel(nil)
	fmt.Println("release:", l.Release(context.Background()))
	// Output:
	// importing; stopped early: false
	// release: <nil>
}

// While one instance holds the lock, another's Do returns ErrNotObtained at
// once, without running its work.
func ExampleClient_Do_notObtained() {
	rdb, stop := embedded()
	defer stop()
	ctx := context.Background()
	a, _ := lock.New(rdb, nil) // two instances, e.g. two pods
	b, _ := lock.New(rdb, nil)

	err := a.Do(ctx, "report:daily", 30*time.Second, func(ctx context.Context) error {
		fmt.Println("a builds the report")
		err := b.Do(ctx, "report:daily", 30*time.Second, func(ctx context.Context) error {
			fmt.Println("b builds the report") // not reached
			return nil
		})
		fmt.Println("b:", err, errors.Is(err, lock.ErrNotObtained))
		return nil
	})
	fmt.Println("a:", err)
	// Output:
	// a builds the report
	// b: lock: not obtained true
	// a: <nil>
}

// Do refreshes the lock while the work runs. When it finds the lock gone
// (here deleted, as when it expired during a long pause), it cancels the
// work's context with cause ErrLost, and the work stops.
func ExampleClient_Do_lost() {
	rdb, stop := embedded()
	defer stop()
	c, _ := lock.New(rdb, nil)

	// A short TTL to keep the example fast: refreshed every 100ms.
	err := c.Do(context.Background(), "import:big-file", 300*time.Millisecond, func(ctx context.Context) error {
		rdb.Del(ctx, "import:big-file")
		<-ctx.Done() // the work, watching ctx
		fmt.Println("work stopped, lost:", errors.Is(context.Cause(ctx), lock.ErrLost))
		return ctx.Err()
	})
	fmt.Println("Do lost:", errors.Is(err, lock.ErrLost))
	// Output:
	// work stopped, lost: true
	// Do lost: true
}

// An Observer feeds a metrics system: here it prints each event. It runs
// synchronously, so it must be quick (a counter, a histogram).
func ExampleOptions_observer() {
	rdb, stop := embedded()
	defer stop()
	ctx := context.Background()

	c, _ := lock.New(rdb, &lock.Options{Observer: func(e lock.Event) {
		// e.Duration is how long obtaining took, or how long the lock was held.
		fmt.Println(e.Kind, e.Key, e.Err)
	}})

	l, _ := c.Obtain(ctx, "invoice:42", 10*time.Second)
	_, _ = c.RunOnce(ctx, "invoice:42", time.Minute, func(ctx context.Context) error { return nil })
	_ = l.Release(ctx)
	_ = l.Release(ctx)
	// Output:
	// obtained invoice:42 <nil>
	// not-obtained invoice:42 lock: not obtained
	// skipped invoice:42 <nil>
	// released invoice:42 <nil>
	// release-failed invoice:42 lock: not held
}

// A waiter with a Retry is handed the lock by the release and woken by a
// notification: its back-off can be long, it only bounds how late a lost
// notification is noticed.
func ExampleWithRetry_handoff() {
	rdb, stop := embedded()
	defer stop()
	ctx := context.Background()
	woken := make(chan struct{}, 1)
	c, _ := lock.New(rdb, &lock.Options{Observer: func(e lock.Event) {
		if e.Kind == lock.EventWoken {
			woken <- struct{}{}
		}
	}})
	wait := lock.WithRetry(lock.LinearBackoff(time.Minute))

	l, _ := c.Obtain(ctx, "invoice:42", 10*time.Second, wait)
	got := make(chan *lock.Lock)
	go func() {
		w, _ := c.Obtain(ctx, "invoice:42", 10*time.Second, wait)
		got <- w
	}()
	// The queue next to the lock, in its cluster slot (docs/permissions.md).
	for rdb.ZCard(ctx, "{invoice:42}:queue").Val() == 0 { // until the waiter has queued
		time.Sleep(time.Millisecond)
	}
	_ = l.Release(ctx) // hands the lock to the waiter, in the same round trip
	w := <-got
	<-woken
	fmt.Println("waiter holds it:", w.Token() != l.Token())
	fmt.Println("release:", w.Release(ctx))
	// Output:
	// waiter holds it: true
	// release: <nil>
}

// The snippets of README.md and docs/locks.md below are these Examples'
// bodies (docs_test.go checks it). They are compiled, not run: they
// connect to a server on localhost:6379.

func buildReport(ctx context.Context) error { return ctx.Err() }

func cleanup(ctx context.Context) error { return ctx.Err() }

// Hold a lock while work runs.
func Example_do() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"}) // or a ClusterClient
	locks, err := lock.New(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// Hold a lock while work runs; it is refreshed every ttl/3 and ctx is
	// cancelled (cause lock.ErrLost) the moment it is lost.
	err = locks.Do(ctx, "report:daily", 30*time.Second, func(ctx context.Context) error {
		return buildReport(ctx)
	})
	if errors.Is(err, lock.ErrNotObtained) {
		log.Print("another instance is on it")
	}
}

// Obtain and release by hand; run a cron's job on one replica.
func Example_obtain() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	locks, err := lock.New(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	l, err := locks.Obtain(ctx, "order:42", 10*time.Second,
		lock.WithRetry(lock.ExponentialBackoff(10*time.Millisecond, 500*time.Millisecond)),
		lock.WithMetadata("pod-7"), // readable by anyone with locks.Inspect
		lock.WithFencing(),         // l.Fence() grows with every acquisition of the key
	)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Release(ctx)
	log.Print("fencing number ", l.Fence())

	// A cron on every replica, run by one: the others get ran == false.
	ran, err := locks.RunOnce(ctx, "cron:cleanup", 10*time.Minute, cleanup,
		lock.WithMinHold(time.Minute))
	log.Print(ran, err)
}

// A semaphore caps the calls to a backend across every process: here at
// two. A third TryAcquire finds both permits held; Acquire waits for a
// release instead. A permit of a process that dies frees its place after
// its TTL.
func ExampleClient_Semaphore() {
	rdb, stop := embedded()
	defer stop()
	ctx := context.Background()

	c, err := lock.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	sem, err := c.Semaphore("backend:payments", 2, 30*time.Second)
	if err != nil {
		panic(err)
	}
	a, _ := sem.Acquire(ctx)
	b, _ := sem.Acquire(ctx)
	_, err = sem.TryAcquire(ctx)
	fmt.Println("third:", err)

	got := make(chan *lock.Permit)
	go func() {
		p, err := sem.Acquire(ctx) // waits for the release below
		if err != nil {
			panic(err)
		}
		got <- p
	}()
	fmt.Println("release:", a.Release(ctx))
	p := <-got
	fmt.Println("waiter got a permit")
	_ = b.Release(ctx)
	_ = p.Release(ctx)
	// Output:
	// third: lock: not obtained
	// release: <nil>
	// waiter got a permit
}
