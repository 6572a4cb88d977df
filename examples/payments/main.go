// Command payments charges and refunds one order from several processes,
// serialised by a lock, and shows why the payment store must check the
// lock's fencing numbers: a worker that freezes (a long GC pause, a stopped
// VM) while it holds the lock wakes up after the lock expired and someone
// else changed the order, and writes anyway.
//
//	go run ./examples/payments                 # embedded server
//	REDIS_URL=redis://localhost:6379 go run ./examples/payments
//
// Four worker processes (this program started again with PAYMENTS_WORKER
// set) share one order. Three race to charge it; one starts a refund and
// freezes with the lock; the other three refund meanwhile; then the frozen
// one thaws and records its refund with its old fencing number. This runs
// twice: against a store that ignores fences, which ends up refunding more
// than was charged, and against one that rejects a fence lower than the
// highest it has seen, which stays consistent. The program exits non-zero
// if the fenced round is inconsistent or accepted the late write.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hotkv/stampede/internal/toolkit/embedded"
	"github.com/hotkv/stampede/internal/toolkit/fleet"
)

func main() {
	if name := os.Getenv(envWorker); name != "" {
		if err := worker(name); err != nil {
			fmt.Fprintln(os.Stderr, "worker", name+":", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "payments:", err)
		os.Exit(1)
	}
}

const (
	price = 100_00 // the order's price, in cents

	frozen = 3 // the worker that freezes: d
)

// names are the workers' names, one letter each.
const names = "abcd"

// name returns worker i's name.
func name(i int) string { return names[i : i+1] }

// outcome is what one round showed.
type outcome struct {
	fenced   bool
	late     Attempt  // the frozen worker's write
	problems []string // broken invariants
	charged  int64    // in the ledger
	refunded int64    // in the ledger
}

// run is the parent: it starts the server and runs both rounds.
func run() error {
	// Ctrl-C or SIGTERM cancels ctx, which kills the workers, so that the
	// deferred clean-up still runs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()

	rdb, url, closeAll, err := embedded.Open(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	fmt.Printf("4 worker processes (a, b, c, d), one order of %s, server %s\n", money(price), embedded.Redacted(url))

	// Keys are unique to this run, so that runs sharing a real server do
	// not see each other's orders.
	id := strings.ToLower(rand.Text()[:8])
	var rounds []outcome
	for i, fenced := range []bool{false, true} {
		title, kind := "a store that ignores fences", "unfenced"
		if fenced {
			title, kind = "a store that rejects stale fences", "fenced"
		}
		fmt.Printf("\nround %d: %s\n", i+1, title)
		prefix := "examples/payments:" + id + ":" + kind
		store := NewStore(rdb, prefix, fenced)
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = store.Delete(ctx, order)
		}()
		env := []string{"REDIS_URL=" + url, envPrefix + "=" + prefix, envFences + "=" + map[bool]string{false: "0", true: "1"}[fenced]}
		o, err := runRound(ctx, store, env)
		if err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
		}
		o.fenced = fenced
		rounds = append(rounds, o)
	}

	fmt.Println()
	unfenced, fenced := rounds[0], rounds[1]
	if unfenced.late.Accepted && len(unfenced.problems) > 0 {
		fmt.Printf("without fencing, d's late refund went through: %s refunded on a %s charge\n",
			money(unfenced.refunded), money(unfenced.charged))
	}
	switch {
	case !fenced.late.Stale:
		return fmt.Errorf("with fencing, d's late write was not rejected: %s", fenced.late.Outcome)
	case len(fenced.problems) > 0:
		return fmt.Errorf("with fencing, the order is inconsistent: %s", strings.Join(fenced.problems, "; "))
	}
	fmt.Printf("with fencing, the store turned d's late refund away and the order stayed consistent: %s charged once, %s refunded\n",
		money(fenced.charged), money(fenced.refunded))
	return nil
}

// runRound plays the race on a fresh order with four workers.
func runRound(ctx context.Context, store *Store, env []string) (outcome, error) {
	var o outcome
	var pause Pause // what the frozen worker reported
	ids := make([]string, len(names))
	for i := range ids {
		ids[i] = name(i)
	}
	f, err := fleet.Start(ctx, ids, func(id string) []string { return append([]string{envWorker + "=" + id}, env...) })
	if err != nil {
		return o, err
	}
	defer f.Close()
	if err := f.Collect(ctx, len(names), func(_ int, line string) error {
		if line != "ready" {
			return fmt.Errorf("unexpected output %q", line)
		}
		return nil
	}); err != nil {
		return o, err
	}
	attempts := func(n int) error {
		return f.Collect(ctx, n, func(_ int, line string) error {
			js, ok := strings.CutPrefix(line, "attempt ")
			if !ok {
				return fmt.Errorf("unexpected output %q", line)
			}
			var a Attempt
			if err := json.Unmarshal([]byte(js), &a); err != nil {
				return fmt.Errorf("bad attempt: %w", err)
			}
			printAttempt(a, pause.TTLLeft)
			if a.Worker == name(frozen) {
				o.late = a
			}
			return nil
		})
	}

	fmt.Printf("  1. a, b and c race to charge %s for %s (three checkouts of one cart)\n", order, money(price))
	for i := range 3 {
		if err := f.Send(i, fmt.Sprintf("charge %d", price)); err != nil {
			return o, err
		}
	}
	if err := attempts(3); err != nil {
		return o, err
	}

	const lateRefund = 60_00
	if err := f.Send(frozen, fmt.Sprintf("refund-pause %d", lateRefund)); err != nil {
		return o, err
	}
	if err := f.Collect(ctx, 1, func(_ int, line string) error {
		js, ok := strings.CutPrefix(line, "paused ")
		if !ok {
			return fmt.Errorf("unexpected output %q", line)
		}
		if err := json.Unmarshal([]byte(js), &pause); err != nil {
			return fmt.Errorf("bad pause: %w", err)
		}
		p := pause
		fmt.Printf("  2. d starts a refund of %s: it takes the lock (fence %d, TTL %v), reads charged %s, refunded %s,\n"+
			"     finds the refund allowed, checks the lock is still its own (%v left) and freezes before writing\n",
			money(lateRefund), p.Fence, pausedTTL, money(p.Read.Charged), money(p.Read.Refunded), p.TTLLeft.Round(time.Millisecond))
		return nil
	}); err != nil {
		return o, err
	}

	refunds := []int64{70_00, 20_00, 50_00}
	fmt.Printf("  3. meanwhile a, b and c refund %s, %s and %s; they get the lock once d's has expired\n",
		money(refunds[0]), money(refunds[1]), money(refunds[2]))
	for i, r := range refunds {
		if err := f.Send(i, fmt.Sprintf("refund %d", r)); err != nil {
			return o, err
		}
	}
	if err := attempts(3); err != nil {
		return o, err
	}

	fmt.Printf("  4. d thaws and carries on where it froze: it records its refund with its old fence\n")
	if err := f.Send(frozen, "wake"); err != nil {
		return o, err
	}
	if err := attempts(1); err != nil {
		return o, err
	}
	if err := f.Finish(ctx); err != nil {
		return o, err
	}

	entries, highest, err := store.Ledger(ctx, order)
	if err != nil {
		return o, err
	}
	st, err := store.Read(ctx, order)
	if err != nil {
		return o, err
	}
	fmt.Printf("\n  ledger of %s:\n     #  operation  amount             fence  by\n", order)
	charges := 0
	for i, e := range entries {
		fmt.Printf("    %2d  %-9s %7s  %16d  %s\n", i+1, e.Op, money(e.Amount), e.Fence, e.Worker)
		switch e.Op {
		case "charge":
			charges++
			o.charged += e.Amount
		case "refund":
			o.refunded += e.Amount
		}
	}
	fmt.Printf("  the order says: charged %s, refunded %s; highest fence the store has seen: %d\n",
		money(st.Charged), money(st.Refunded), highest)

	// The invariants a payment system must keep.
	if charges != 1 {
		o.problems = append(o.problems, fmt.Sprintf("%d charges in the ledger, want 1", charges))
	}
	if o.refunded > o.charged {
		o.problems = append(o.problems, fmt.Sprintf("refunds in the ledger (%s) exceed the charge (%s)", money(o.refunded), money(o.charged)))
	}
	if st.Charged != o.charged || st.Refunded != o.refunded {
		o.problems = append(o.problems, fmt.Sprintf("the order says charged %s, refunded %s, but the ledger adds up to %s and %s: an update was lost",
			money(st.Charged), money(st.Refunded), money(o.charged), money(o.refunded)))
	}
	if len(o.problems) == 0 {
		fmt.Printf("  check: consistent: one charge of %s, %s refunded, the order matches its ledger\n", money(o.charged), money(o.refunded))
	} else {
		fmt.Println("  check: INCONSISTENT")
		for _, p := range o.problems {
			fmt.Println("    - " + p)
		}
	}
	return o, nil
}

// printAttempt prints one operation's line. ttlLeft is what was left of
// the frozen worker's lock when it froze.
func printAttempt(a Attempt, ttlLeft time.Duration) {
	wait := ""
	if a.LockWait >= 10*time.Millisecond {
		wait = fmt.Sprintf(" (waited %v for the lock)", a.LockWait.Round(time.Millisecond))
	}
	if a.Frozen > 0 {
		wait = fmt.Sprintf(" (frozen %v; its lock had expired %v before it thawed)",
			a.Frozen.Round(time.Millisecond), (a.Frozen - ttlLeft).Round(time.Millisecond))
	}
	fmt.Printf("     %s  %-6s %6s  fence %d  read: charged %6s, refunded %5s  -> %s%s\n",
		a.Worker, a.Op, money(a.Amount), a.Fence, money(a.Read.Charged), money(a.Read.Refunded), a.Outcome, wait)
	if a.Release != "" {
		fmt.Printf("        then releasing its lock: %s\n", a.Release)
	}
}
