package lock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// Worker processes read their parameters from the environment and report
// on stdout; they exit non-zero on any unexpected error.

func workerEnv(name string) string { return os.Getenv("LOCKTEST_" + name) }

func workerInt(name string) int {
	n, err := strconv.Atoi(workerEnv(name))
	if err != nil {
		panic(fmt.Sprintf("worker: %s: %v", name, err))
	}
	return n
}

func workerClient() *lock.Client {
	c, err := lock.New(redistest.WorkerClient(), nil)
	if err != nil {
		panic(err)
	}
	return c
}

// workerCounter increments a plain GET/SET counter under the lock:
// LOCKTEST_G goroutines × LOCKTEST_N increments. Any lost update shows as a
// final count below the total.
func workerCounter() int {
	rc := redistest.WorkerClient()
	defer rc.Close()
	c, _ := lock.New(rc, nil)
	key, counter := workerEnv("KEY"), workerEnv("COUNTER")
	g, n := workerInt("G"), workerInt("N")
	ctx := context.Background()
	errs := make(chan error, g)
	var wg sync.WaitGroup
	for range g {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				// MaxWait is no deadline: 32 contenders on a slow server (miniredis
				// on a busy machine) can keep one waiting past any guess; the test
				// bounds the run by the counter's progress instead.
				err := c.Do(ctx, key, 5*time.Second, func(ctx context.Context) error {
					v, err := rc.Get(ctx, counter).Int()
					if err != nil && err.Error() != "redis: nil" {
						return err
					}
					return rc.Set(ctx, counter, v+1, 0).Err()
				}, lock.WithRetry(lock.ExponentialBackoff(time.Millisecond, 20*time.Millisecond)), lock.WithMaxWait(10*time.Minute))
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

func TestLock_mutualExclusion_processes(t *testing.T) {
	redistest.Long(t)
	const procs, goroutines, n = 4, 8, 25
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		rc := s.Client(t)
		key, counter := redistest.Key(t, "lock"), redistest.Key(t, "counter")
		// 800 critical sections take a second on an idle machine and many
		// on a busy one: the deadline is on progress, not on the whole.
		ctx := redistest.Progress(t, t.Context(), 20*time.Second, "the counter", func() int64 {
			n, _ := rc.Get(t.Context(), counter).Int64()
			return n
		})
		var ps []*redistest.Proc
		for range procs {
			ps = append(ps, redistest.Spawn(t, s, "counter", "LOCKTEST_KEY="+key, "LOCKTEST_COUNTER="+counter,
				fmt.Sprintf("LOCKTEST_G=%d", goroutines), fmt.Sprintf("LOCKTEST_N=%d", n)))
		}
		for i, p := range ps {
			if _, err := p.Wait(ctx); err != nil {
				t.Fatalf("worker %d: %v (%v)", i, err, context.Cause(ctx))
			}
		}
		got, err := rc.Get(t.Context(), counter).Int()
		if err != nil {
			t.Fatal(err)
		}
		if want := procs * goroutines * n; got != want {
			t.Errorf("counter = %d, want %d: %d updates lost", got, want, want-got)
		}
	})
}

// workerHold obtains the lock, says "held" and then blocks until killed.
func workerHold() int {
	c := workerClient()
	ttl, _ := time.ParseDuration(workerEnv("TTL"))
	meta := lock.WithMetadata("pid " + strconv.Itoa(os.Getpid()))
	if _, err := c.Obtain(context.Background(), workerEnv("KEY"), ttl, meta); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	fmt.Println("held")
	select {}
}

func TestLock_killedHolder(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newClient(t, s, nil)
		key := redistest.Key(t, "lock")
		p := redistest.Spawn(t, s, "hold", "LOCKTEST_KEY="+key, "LOCKTEST_TTL=700ms")
		select {
		case line := <-p.Lines():
			if line != "held" {
				t.Fatalf("worker said %q", line)
			}
		case <-ctx.Done():
			t.Fatal("worker never obtained the lock")
		}
		p.Kill()
		info, err := c.Inspect(ctx, key)
		if err != nil || !strings.HasPrefix(info.Metadata, "pid ") {
			t.Fatalf("Inspect after kill = %+v, %v; want the dead holder's lock", info, err)
		}
		if _, err := c.Obtain(ctx, key, time.Second); !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("Obtain right after kill = %v, want ErrNotObtained (TTL not over)", err)
		}
		l, err := c.Obtain(ctx, key, time.Second,
			lock.WithRetry(lock.LinearBackoff(10*time.Millisecond)), lock.WithMaxWait(10*time.Second))
		if err != nil {
			t.Fatalf("Obtain after the dead holder's TTL: %v", err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// workerFence obtains a fenced lock LOCKTEST_N times and, while holding it,
// appends its fencing number to a list. Every other acquisition is left
// to expire instead of being released.
// fencedPush appends ARGV[1], a fence, to the list KEYS[1] only if it is
// greater than the last fence there: the list is a fenced store, as
// docs/locks.md tells a fenced lock's users to keep. It returns 1 if appended.
var fencedPush = redis.NewScript(`
local last = redis.call('LINDEX', KEYS[1], -1)
if last and tonumber(last) >= tonumber(ARGV[1]) then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[1])
return 1`)

// workerFence obtains a fenced lock LOCKTEST_N times and, while holding
// it, appends its fence to the fenced list LOCKTEST_LIST. A lock of 40ms
// without keep-alive can expire before the append (a busy machine
// stalls a process for longer); the store then turns the late fence away,
// which is what fencing is for. A fence turned away while its lock is
// still held would mean a higher fence was issued to another holder
// meanwhile: the worker fails. It prints "late N", the fences turned away.
func workerFence() int {
	rc := redistest.WorkerClient()
	defer rc.Close()
	c, _ := lock.New(rc, nil)
	ctx := context.Background()
	key, list := workerEnv("KEY"), workerEnv("LIST")
	late := 0
	for i := range workerInt("N") {
		l, err := c.Obtain(ctx, key, 40*time.Millisecond,
			lock.WithFencing(), lock.WithRetry(lock.LinearBackoff(2*time.Millisecond)), lock.WithMaxWait(20*time.Second))
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			return 1
		}
		ok, err := fencedPush.Run(ctx, rc, []string{list}, l.Fence()).Int()
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			return 1
		}
		if ok == 0 {
			if _, err := l.TTL(ctx); !errors.Is(err, lock.ErrNotHeld) {
				fmt.Fprintf(os.Stderr, "worker: fence %d turned away while its lock is held (TTL: %v)\n", l.Fence(), err)
				return 1
			}
			late++
		}
		if i%2 == 0 {
			_ = l.Release(ctx) // ErrNotHeld is possible if the push was slow
		}
	}
	fmt.Printf("late %d\n", late)
	return 0
}

func TestLock_fencing_processes(t *testing.T) {
	redistest.Long(t)
	const procs, n = 3, 15
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		rc := s.Client(t)
		// A hash-tagged key on the cluster exercises the tag-reuse path.
		key, list := "{"+redistest.Key(t, "fenced")+"}:lock", redistest.Key(t, "fences")
		ctx := redistest.Progress(t, t.Context(), 20*time.Second, "the fenced list", func() int64 {
			n, _ := rc.LLen(t.Context(), list).Result()
			return n
		})
		var ps []*redistest.Proc
		for range procs {
			ps = append(ps, redistest.Spawn(t, s, "fence", "LOCKTEST_KEY="+key, "LOCKTEST_LIST="+list, fmt.Sprintf("LOCKTEST_N=%d", n)))
		}
		late := 0
		for i, p := range ps {
			out, err := p.Wait(ctx)
			if err != nil {
				t.Fatalf("worker %d: %v (%v)", i, err, context.Cause(ctx))
			}
			var l int
			if _, err := fmt.Sscanf(out[strings.LastIndex(out, "late "):], "late %d", &l); err != nil {
				t.Fatalf("worker %d printed %q: %v", i, out, err)
			}
			late += l
		}
		fences, err := rc.LRange(t.Context(), list, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d fences recorded, %d turned away as late (their 40ms locks had expired)", len(fences), late)
		if len(fences)+late != procs*n {
			t.Fatalf("%d fences recorded and %d turned away, want %d in all", len(fences), late, procs*n)
		}
		prev := int64(0)
		for i, f := range fences {
			v, _ := strconv.ParseInt(f, 10, 64)
			if v <= prev {
				t.Fatalf("fence %d = %d after %d: not strictly increasing (%v)", i, v, prev, fences)
			}
			prev = v
		}
	})
}

// TestLock_fencing_keys checks the fence counter shares the lock's cluster
// slot for plain and hash-tagged keys (on a cluster a cross-slot script
// fails).
func TestLock_fencing_keys(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, rc := newClient(t, s, nil)
		base := redistest.Key(t, "k")
		for _, key := range []string{base, "orders:{" + base + "}", "{" + base + "}", base + "{", "a{" + base} {
			l1, err := c.Obtain(ctx, key, time.Minute, lock.WithFencing())
			if err != nil {
				t.Fatalf("%q: %v", key, err)
			}
			if err := l1.Release(ctx); err != nil {
				t.Fatal(err)
			}
			l2, err := c.Obtain(ctx, key, time.Minute, lock.WithFencing())
			if err != nil {
				t.Fatal(err)
			}
			if l1.Fence() < 1 || l2.Fence() <= l1.Fence() {
				t.Errorf("%q: fences %d then %d, want positive and growing", key, l1.Fence(), l2.Fence())
			}
			if fk, ok := lock.FenceKey(key); !ok {
				t.Errorf("FenceKey(%q) not ok", key)
			} else if n, err := rc.Get(ctx, fk).Int64(); err != nil || n != l2.Fence() {
				t.Errorf("FenceKey(%q) = %q holds %d, %v; want %d", key, fk, n, err, l2.Fence())
			}
			_ = l2.Release(ctx)
		}
	})
}
