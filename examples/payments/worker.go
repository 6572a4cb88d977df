package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// A worker is this program started again with PAYMENTS_WORKER set: one
// instance of the payment service. It talks to the parent over stdin and
// stdout, one line per message:
//
//	parent → worker   "charge CENTS"        charge the order, unless it is charged
//	parent → worker   "refund CENTS"        refund, unless more than is left
//	parent → worker   "refund-pause CENTS"  the same, but freeze before writing
//	parent → worker   "wake"                end the freeze
//	worker → parent   "ready"
//	worker → parent   "paused {json}"       a Pause: frozen with the lock
//	worker → parent   "attempt {json}"      an Attempt: one operation's outcome
const (
	envWorker = "PAYMENTS_WORKER" // worker name; set only in workers
	envPrefix = "PAYMENTS_PREFIX" // prefix of this round's keys
	envFences = "PAYMENTS_FENCES" // "1" if the store checks fences
	// REDIS_URL names the server, as for the parent.

	order = "order-42" // the one order every worker operates on
)

const (
	// lockTTL is the lock TTL of normal operations; lock.Do keeps the
	// lock alive while they run.
	lockTTL = 2 * time.Second
	// pausedTTL is the lock TTL of the operation that freezes.
	pausedTTL = 300 * time.Millisecond
	// riskCheck is how long deciding takes (a fraud check, the bank's
	// answer) between reading the order and recording the operation.
	riskCheck = 30 * time.Millisecond
)

// Attempt is one operation and what became of it.
type Attempt struct {
	Worker   string
	Op       string // "charge" or "refund"
	Amount   int64  // cents
	Fence    int64  // 0 if the lock was not obtained
	Read     State  // what the worker read under the lock
	Outcome  string
	Accepted bool          // the store recorded it
	Stale    bool          // the store rejected it: stale fence
	LockWait time.Duration // from asking for the lock to holding it
	Frozen   time.Duration // how long the worker was frozen before writing
	Release  string        // what releasing the lock returned, if not nil
}

// Pause is what the freezing worker reports when it freezes.
type Pause struct {
	Fence   int64
	Read    State
	TTLLeft time.Duration // the lock's remaining TTL at the freeze
}

// worker runs one worker process.
func worker(name string) error {
	opts, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	locks, err := lock.New(rdb, nil)
	if err != nil {
		return err
	}
	store := NewStore(rdb, os.Getenv(envPrefix), os.Getenv(envFences) == "1")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	fmt.Println("ready")

	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd, arg, _ := strings.Cut(in.Text(), " ")
		amount, err := strconv.ParseInt(arg, 10, 64)
		if err != nil {
			return fmt.Errorf("unexpected input %q", in.Text())
		}
		var a Attempt
		switch cmd {
		case "charge", "refund":
			a, err = operate(ctx, locks, store, name, cmd, amount)
		case "refund-pause":
			a, err = operateAndFreeze(ctx, locks, store, name, amount, in)
		default:
			return fmt.Errorf("unexpected input %q", in.Text())
		}
		if err != nil {
			return err
		}
		b, err := json.Marshal(a)
		if err != nil {
			return err
		}
		fmt.Println("attempt", string(b))
	}
	return in.Err()
}

// decide is the business rule, applied to what was read under the lock:
// charge an order once; never refund more than is left. It returns the
// state to write, or why there is nothing to write.
func decide(op string, amount int64, st State) (next State, why string) {
	next = st
	switch op {
	case "charge":
		if st.Charged > 0 {
			return st, "skipped: already charged"
		}
		next.Charged = amount
	case "refund":
		if left := st.Charged - st.Refunded; amount > left {
			return st, "declined: only " + money(left) + " left to refund"
		}
		next.Refunded += amount
	}
	return next, ""
}

// operate runs one operation the way every instance should: under the lock,
// kept alive by lock.Do, writing with the lock's fencing number.
func operate(ctx context.Context, locks *lock.Client, store *Store, name, op string, amount int64) (Attempt, error) {
	a := Attempt{Worker: name, Op: op, Amount: amount}
	fencing, meta, retry, maxWait := lockOptions(name)
	asked := time.Now()
	err := locks.Do(ctx, store.LockKey(order), lockTTL, func(ctx context.Context) error {
		a.LockWait = time.Since(asked)
		a.Fence = lock.FromContext(ctx).Fence()
		st, err := store.Read(ctx, order)
		if err != nil {
			return err
		}
		a.Read = st
		next, why := decide(op, amount, st)
		if why != "" {
			a.Outcome = why
			return nil
		}
		sleep(ctx, riskCheck)
		if ctx.Err() != nil {
			return context.Cause(ctx) // the lock was lost: do not write
		}
		return a.record(ctx, store, next)
	}, fencing, meta, retry, maxWait)
	return a, err
}

// lockOptions say how every worker takes the order's lock: with a fencing
// number, its name as metadata, waiting up to 10s for another holder. Each
// is an option of both Obtain and Do (lock.Option, lock.WaitOption).
func lockOptions(name string) (fencing, meta lock.Option, retry, maxWait lock.WaitOption) {
	return lock.WithFencing(), lock.WithMetadata("worker " + name),
		lock.WithRetry(lock.LinearBackoff(10 * time.Millisecond)), lock.WithMaxWait(10 * time.Second)
}

// operateAndFreeze runs a refund that is frozen, as by a long GC pause or a
// stopped VM, after it has decided and before it writes. It holds the lock
// with a short TTL, keeping it alive until the freeze; a frozen process
// refreshes nothing, so the lock expires and another worker takes it. The
// freeze ends when the parent says "wake"; then the worker carries on
// where it stopped: it records the refund with its old fencing number.
func operateAndFreeze(ctx context.Context, locks *lock.Client, store *Store, name string, amount int64, in *bufio.Scanner) (Attempt, error) {
	a := Attempt{Worker: name, Op: "refund", Amount: amount}
	fencing, meta, retry, maxWait := lockOptions(name)
	asked := time.Now()
	l, err := locks.Obtain(ctx, store.LockKey(order), pausedTTL, fencing, meta, retry, maxWait)
	if err != nil {
		return a, err
	}
	a.LockWait = time.Since(asked)
	a.Fence = l.Fence()
	held, stopKeepAlive := l.KeepAlive(ctx, pausedTTL, 0)
	st, err := store.Read(held, order)
	if err != nil {
		stopKeepAlive()
		return a, err
	}
	a.Read = st
	next, why := decide("refund", amount, st)
	if why != "" {
		stopKeepAlive()
		return a, fmt.Errorf("the refund to freeze in was %s", why)
	}
	sleep(held, riskCheck)
	// The last look before the write: the lock is still ours. This is as
	// far as any check can go; the freeze can come right after it.
	left, err := l.TTL(held)
	if err != nil {
		stopKeepAlive()
		return a, fmt.Errorf("lock lost before the freeze: %w", err)
	}

	// Freeze. Everything in the process stops, the keep-alive too.
	stopKeepAlive()
	b, _ := json.Marshal(Pause{Fence: a.Fence, Read: st, TTLLeft: left})
	fmt.Println("paused", string(b))
	frozen := time.Now()
	if !in.Scan() || in.Text() != "wake" {
		return a, fmt.Errorf("waiting for wake: got %q, %v", in.Text(), in.Err())
	}
	a.Frozen = time.Since(frozen)

	// Thawed: the next instruction is the write, with the fence of a lock
	// that expired while the process was frozen.
	if err := a.record(ctx, store, next); err != nil {
		return a, err
	}
	if err := l.Release(ctx); err != nil {
		a.Release = err.Error()
	}
	return a, nil
}

// record writes next and the ledger entry with a's fence, and notes the
// store's answer in a. Only errors other than a stale fence are returned.
func (a *Attempt) record(ctx context.Context, store *Store, next State) error {
	err := store.Record(ctx, order, next, Entry{Op: a.Op, Amount: a.Amount, Fence: a.Fence, Worker: a.Worker, At: time.Now()})
	switch {
	case err == nil:
		a.Accepted, a.Outcome = true, "accepted"
	case errors.Is(err, ErrStaleFence):
		a.Stale, a.Outcome = true, "rejected: "+strings.TrimPrefix(err.Error(), "payments: ")
	default:
		return err
	}
	return nil
}

// money formats cents.
func money(cents int64) string {
	return fmt.Sprintf("%d.%02d", cents/100, cents%100)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
