package flight_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/flight"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func detached() (context.Context, func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	return ctx, cancel, nil
}

// waitJoined yields until n callers have joined the call for key: the
// only way to see that a goroutine is blocked inside Do.
func waitJoined[V any](tb testing.TB, g *flight.Group[V], key string, n int) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for g.Joined(key) < n {
		if time.Now().After(deadline) {
			tb.Fatalf("only %d of %d callers joined", g.Joined(key), n)
		}
		runtime.Gosched()
	}
}

func TestGroup_Do_coalesces(t *testing.T) {
	var g flight.Group[int]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	release := make(chan struct{})
	started := make(chan struct{})
	var calls atomic.Int32
	fn := func(context.Context) (int, error) {
		calls.Add(1)
		close(started)
		<-release
		return 42, nil
	}
	const n = 50
	type res struct {
		v      int
		err    error
		shared bool
	}
	out := make(chan res, n)
	go func() {
		v, err, shared := g.Do(ctx, "k", detached, fn)
		out <- res{v, err, shared}
	}()
	<-started
	var wg sync.WaitGroup
	for range n - 1 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err, shared := g.Do(ctx, "k", detached, fn)
			out <- res{v, err, shared}
		}()
	}
	waitJoined(t, &g, "k", n)
	close(release)
	wg.Wait()
	shared := 0
	for range n {
		r := <-out
		if r.err != nil || r.v != 42 {
			t.Fatalf("Do = %d, %v", r.v, r.err)
		}
		if r.shared {
			shared++
		}
	}
	if c := calls.Load(); c != 1 || shared != n-1 {
		t.Errorf("%d calls and %d shared results for %d callers, want 1 and %d", c, shared, n, n-1)
	}
}

func TestGroup_Do_waiterCancels(t *testing.T) {
	var g flight.Group[string]
	release := make(chan struct{})
	loadCtx := make(chan context.Context, 1)
	fn := func(ctx context.Context) (string, error) {
		loadCtx <- ctx
		<-release
		return "v", ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err, _ := g.Do(ctx, "k", detached, fn)
		done <- err
	}()
	lctx := <-loadCtx
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter got %v", err)
	}
	if lctx.Err() != nil {
		t.Fatal("the shared load was cancelled with its caller")
	}
	// A second caller joins the still-running load and gets its result.
	got := make(chan string, 1)
	go func() {
		v, _, _ := g.Do(context.Background(), "k", detached, fn)
		got <- v
	}()
	waitJoined(t, &g, "k", 2)
	close(release)
	if v := <-got; v != "v" {
		t.Errorf("joiner got %q", v)
	}
}

// panicError is what the tests' Recover makes of a panic.
type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprint("panic: ", p.value) }

func TestGroup_Do_panic(t *testing.T) {
	g := flight.Group[int]{Recover: func(v any, stack []byte) error { return &panicError{v, stack} }}
	_, err, _ := g.Do(context.Background(), "k", detached, func(context.Context) (int, error) {
		panic(errors.New("boom"))
	})
	var pe *panicError
	if !errors.As(err, &pe) || pe.value.(error).Error() != "boom" || len(pe.stack) == 0 {
		t.Fatalf("err = %v, want the Recover's error with the value and a stack", err)
	}
	if g.Joined("k") != 0 {
		t.Error("a panicked call is still registered")
	}
	var zero flight.Group[int]
	_, err, _ = zero.Do(context.Background(), "k", detached, func(context.Context) (int, error) { panic("boom") })
	if err == nil || err.Error() != "flight: panic: boom" {
		t.Errorf("without a Recover: err = %v, want flight: panic: boom", err)
	}
}

func TestGroup_Do_startRefuses(t *testing.T) {
	var g flight.Group[int]
	closed := errors.New("closed")
	ran := false
	_, err, _ := g.Do(context.Background(), "k", func() (context.Context, func(), error) { return nil, nil, closed },
		func(context.Context) (int, error) { ran = true; return 1, nil })
	if !errors.Is(err, closed) || ran || g.Joined("k") != 0 {
		t.Errorf("err = %v, ran = %t; want the starter's error and no call", err, ran)
	}
}

// TestGroup_Forget: after Forget, a new caller starts a new call while the
// forgotten one still answers the callers that had joined it; when the
// forgotten call ends it does not remove the new one.
func TestGroup_Forget(t *testing.T) {
	var g flight.Group[int]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	releaseOld, releaseNew := make(chan struct{}), make(chan struct{})
	started := make(chan struct{})
	old := make(chan int, 1)
	go func() {
		v, _, _ := g.Do(ctx, "k", detached, func(context.Context) (int, error) {
			close(started)
			<-releaseOld
			return 1, nil
		})
		old <- v
	}()
	<-started
	g.Forget("k")
	if n := g.Joined("k"); n != 0 {
		t.Fatalf("Joined after Forget = %d, want 0", n)
	}
	fresh := make(chan int, 2)
	var calls atomic.Int32
	newFn := func(context.Context) (int, error) {
		calls.Add(1)
		<-releaseNew
		return 2, nil
	}
	go func() { v, _, _ := g.Do(ctx, "k", detached, newFn); fresh <- v }()
	waitJoined(t, &g, "k", 1)
	close(releaseOld) // the forgotten call ends while the new one runs
	if v := <-old; v != 1 {
		t.Fatalf("forgotten call's caller got %d, want 1", v)
	}
	go func() { v, _, _ := g.Do(ctx, "k", detached, newFn); fresh <- v }()
	waitJoined(t, &g, "k", 2) // joined the new call: the old finish left it alone
	close(releaseNew)
	if a, b := <-fresh, <-fresh; a != 2 || b != 2 || calls.Load() != 1 {
		t.Fatalf("new callers got %d, %d from %d calls; want 2, 2 from 1", a, b, calls.Load())
	}
}

func TestGroup_Finished_counts(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	type finished struct {
		key     string
		v       int
		callers int
	}
	ended := make(chan finished, 2)
	g := flight.Group[int]{Finished: func(key string, v int, err error, callers int) {
		ended <- finished{key, v, callers}
	}}
	release := make(chan struct{})
	fn := func(context.Context) (int, error) { <-release; return 7, nil }
	errs := make(chan error, 8)
	do := func(ctx context.Context) {
		_, err, _ := g.Do(ctx, "k", detached, fn)
		errs <- err
	}
	// The caller that starts the call gives up: the call is its all the
	// same, and counts it.
	leader, leaderLeaves := context.WithCancel(ctx)
	go do(leader)
	waitJoined(t, &g, "k", 1)
	const stay = 3
	for range stay {
		go do(ctx)
	}
	// One more caller joins, then gives up: it is no caller at the end.
	joiner, joinerLeaves := context.WithCancel(ctx)
	go do(joiner)
	waitJoined(t, &g, "k", stay+2)
	leaderLeaves()
	joinerLeaves()
	for range 2 {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("a caller that left got %v", err)
		}
	}
	// A reader that attaches to the call counts without waiting for it.
	if !g.Attach("k") {
		t.Fatal("Attach found no call in progress")
	}
	if g.Attach("other") {
		t.Fatal("Attach found a call of a key nobody called")
	}
	close(release)
	for range stay {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	select {
	case f := <-ended:
		if want := (finished{"k", 7, 1 + stay + 1}); f != want {
			t.Errorf("Finished(%q, %d, _, %d), want %d callers (the leader, %d that waited, 1 attached; not the joiner that left)", f.key, f.v, f.callers, want.callers, stay)
		}
	case <-ctx.Done():
		t.Fatal("Finished was not called")
	}
	// A call the start function refuses finishes with its one caller.
	refuse := func() (context.Context, func(), error) { return nil, nil, errors.New("closed") }
	if _, err, _ := g.Do(ctx, "r", refuse, fn); err == nil {
		t.Fatal("refused call returned no error")
	}
	if f := <-ended; f.key != "r" || f.callers != 1 {
		t.Errorf("refused call finished as %+v, want key r and 1 caller", f)
	}
}
