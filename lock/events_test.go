package lock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
)

// recorder collects the events an Observer receives, from any goroutine.
type recorder struct {
	mu     sync.Mutex
	events []lock.Event
}

func (r *recorder) observe(e lock.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// take returns the events received since the last take.
func (r *recorder) take() []lock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events = nil
	return e
}

func kinds(events []lock.Event) []lock.EventKind {
	k := make([]lock.EventKind, len(events))
	for i, e := range events {
		k[i] = e.Kind
	}
	return k
}

// syncBuffer is a bytes.Buffer safe for the keep-alive's goroutine and the
// test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestClient_Observer_sequence(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	var rec recorder
	c, rc := newClient(t, s, &lock.Options{Observer: rec.observe})
	other, _ := newClient(t, s, nil) // another instance, unobserved
	key := redistest.Key(t, "lock")
	const ttl = 2 * time.Second

	// step checks the events since the last step: their kinds in order,
	// that each names key, and that each error matches the kind.
	step := func(name, key string, want ...lock.EventKind) []lock.Event {
		t.Helper()
		got := rec.take()
		if !slices.Equal(kinds(got), want) {
			t.Fatalf("%s: events %v, want %v", name, kinds(got), want)
		}
		for _, e := range got {
			if e.Key != key {
				t.Errorf("%s: %v event for key %q, want %q", name, e.Kind, e.Key, key)
			}
			if e.Duration < 0 {
				t.Errorf("%s: %v event with negative duration %v", name, e.Kind, e.Duration)
			}
			var want error
			switch e.Kind {
			case lock.EventNotObtained:
				want = lock.ErrNotObtained
			case lock.EventReleaseFailed, lock.EventRefreshFailed:
				want = lock.ErrNotHeld
			case lock.EventLost:
				want = lock.ErrLost
			}
			if !errors.Is(e.Err, want) || (want == nil) != (e.Err == nil) {
				t.Errorf("%s: %v event with error %v, want %v", name, e.Kind, e.Err, want)
			}
		}
		return got
	}

	// Obtain, Refresh, Release, one event per call.
	l, err := c.Obtain(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	step("Obtain", key, lock.EventObtained)
	if _, err := c.Obtain(ctx, key, ttl); !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("second Obtain = %v, want ErrNotObtained", err)
	}
	step("Obtain held", key, lock.EventNotObtained)
	if err := l.Refresh(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	step("Refresh", key, lock.EventRefreshed)
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if e := step("Release", key, lock.EventReleased); e[0].Duration <= 0 {
		t.Errorf("released after %v, want how long the lock was held", e[0].Duration)
	}
	if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Release = %v, want ErrNotHeld", err)
	}
	if err := l.Refresh(ctx, ttl); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Refresh after Release = %v, want ErrNotHeld", err)
	}
	step("Release and Refresh not held", key, lock.EventReleaseFailed, lock.EventRefreshFailed)
	if _, err := c.Obtain(ctx, "", ttl); !errors.Is(err, lock.ErrInvalid) {
		t.Fatalf("Obtain of an empty key = %v, want ErrInvalid", err)
	}
	step("Obtain with bad arguments", "")

	// Do whose keep-alive refreshes until the work returns.
	refreshed := make(chan struct{})
	var once sync.Once
	c2, _ := newClient(t, s, &lock.Options{Observer: func(e lock.Event) {
		rec.observe(e)
		if e.Kind == lock.EventRefreshed {
			once.Do(func() { close(refreshed) })
		}
	}})
	err = c2.Do(ctx, key, ttl, func(wctx context.Context) error {
		select {
		case <-refreshed:
			return nil
		case <-wctx.Done():
			return context.Cause(wctx)
		}
	}, lock.WithRefreshEvery(50*time.Millisecond))
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	// How many refreshes fit before the work returns depends on the
	// scheduler; their place in the sequence does not.
	got := rec.take()
	got = slices.CompactFunc(got, func(a, b lock.Event) bool {
		return a.Kind == lock.EventRefreshed && b.Kind == lock.EventRefreshed
	})
	if want := []lock.EventKind{lock.EventObtained, lock.EventRefreshed, lock.EventReleased}; !slices.Equal(kinds(got), want) {
		t.Fatalf("Do: events %v, want %v", kinds(got), want)
	}

	// Do whose lock is deleted behind its back: the keep-alive's refresh
	// fails, the loss is reported once, and so is the release that finds
	// the lock gone.
	err = c.Do(ctx, key, ttl, func(wctx context.Context) error {
		if err := rc.Del(ctx, key).Err(); err != nil {
			return err
		}
		<-wctx.Done()
		return nil
	}, lock.WithRefreshEvery(100*time.Millisecond)) // the Del comes first
	if !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Do = %v, want ErrLost", err)
	}
	step("Do lost", key, lock.EventObtained, lock.EventRefreshFailed, lock.EventLost, lock.EventReleaseFailed)

	// Do on a lock held elsewhere.
	held, err := other.Obtain(ctx, key, ttl)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Do(ctx, key, ttl, func(context.Context) error { return errors.New("ran") })
	if !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("Do on a held lock = %v, want ErrNotObtained", err)
	}
	step("Do held elsewhere", key, lock.EventNotObtained)

	// RunOnce: skipped while another instance holds the lock, run once it
	// is free.
	ran, err := c.RunOnce(ctx, key, ttl, func(context.Context) error { return errors.New("ran") })
	if ran || err != nil {
		t.Fatalf("RunOnce on a held lock = %t, %v; want false, nil", ran, err)
	}
	if e := step("RunOnce skipped", key, lock.EventNotObtained, lock.EventSkipped); e[1].Err != nil {
		t.Errorf("skipped with error %v, want nil", e[1].Err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	ran, err = c.RunOnce(ctx, key, ttl, func(context.Context) error { return nil })
	if !ran || err != nil {
		t.Fatalf("RunOnce = %t, %v; want true, nil", ran, err)
	}
	step("RunOnce", key, lock.EventObtained, lock.EventReleased)

	// RunOnce whose lock is deleted while the job runs: the loss is
	// reported once, after the release that finds the lock gone.
	ran, err = c.RunOnce(ctx, key, ttl, func(context.Context) error { return rc.Del(ctx, key).Err() })
	if !ran || !errors.Is(err, lock.ErrLost) {
		t.Fatalf("RunOnce = %t, %v; want true, ErrLost", ran, err)
	}
	step("RunOnce lost", key, lock.EventObtained, lock.EventReleaseFailed, lock.EventLost)
}

// callerKey marks a caller's context, for finding its values in
// Event.Context.
type callerKey struct{}

// Each event carries the context of the call it belongs to: an Obtain's
// (of Do's and RunOnce's too), a Release's, a Refresh's; the keep-alive's
// own events, which no caller's context reaches, a context all the same.
func TestClient_Observer_context(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var rec recorder
	c, _ := newClient(t, s, &lock.Options{Observer: rec.observe})
	key := redistest.Key(t, "lock")
	const ttl = 2 * time.Second
	tests := []struct {
		name string
		run  func(ctx context.Context) error
		want []lock.EventKind // carrying ctx's value, in order
	}{
		{"Obtain, Refresh, Release", func(ctx context.Context) error {
			l, err := c.Obtain(ctx, key, ttl)
			if err != nil {
				return err
			}
			if err := l.Refresh(ctx, ttl); err != nil {
				return err
			}
			return l.Release(ctx)
		}, []lock.EventKind{lock.EventObtained, lock.EventRefreshed, lock.EventReleased}},
		{"held", func(ctx context.Context) error {
			l, err := c.Obtain(context.Background(), key, ttl)
			if err != nil {
				return err
			}
			defer l.Release(context.Background())
			if _, err := c.Obtain(ctx, key, ttl); !errors.Is(err, lock.ErrNotObtained) {
				return fmt.Errorf("Obtain of a held lock = %v, want ErrNotObtained", err)
			}
			if ran, err := c.RunOnce(ctx, key, ttl, func(context.Context) error { return nil }); ran || err != nil {
				return fmt.Errorf("RunOnce of a held lock = %v, %v; want not run", ran, err)
			}
			return nil
		}, []lock.EventKind{lock.EventNotObtained, lock.EventNotObtained, lock.EventSkipped}},
		{"Do", func(ctx context.Context) error {
			return c.Do(ctx, key, ttl, func(context.Context) error { return nil })
		}, []lock.EventKind{lock.EventObtained, lock.EventReleased}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.WithValue(testCtx(t), callerKey{}, tt.name)
			if err := tt.run(ctx); err != nil {
				t.Fatal(err)
			}
			var got []lock.EventKind
			for _, e := range rec.take() {
				switch {
				case e.Context == nil:
					t.Errorf("%v event without a Context", e.Kind)
				case e.Context.Value(callerKey{}) == tt.name:
					got = append(got, e.Kind)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("events with the caller's context %v, want %v", got, tt.want)
			}
		})
	}
}

func TestClient_Logger_lostLock(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	var buf syncBuffer
	logger := slog.New(slog.NewTextHandler(&buf, nil)) // Info and above
	c, rc := newClient(t, s, &lock.Options{Logger: logger})
	key := redistest.Key(t, "lock")

	// Obtaining and releasing log nothing.
	if err := c.Do(ctx, key, time.Second, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); out != "" {
		t.Fatalf("Do logged %q, want nothing", out)
	}

	err := c.Do(ctx, key, 2*time.Second, func(wctx context.Context) error {
		if err := rc.Del(ctx, key).Err(); err != nil {
			return err
		}
		<-wctx.Done()
		return nil
	}, lock.WithRefreshEvery(100*time.Millisecond)) // the Del comes first
	if !errors.Is(err, lock.ErrLost) {
		t.Fatalf("Do = %v, want ErrLost", err)
	}
	out := buf.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "lost") ||
		!strings.Contains(lines[0], "key="+key) {
		t.Errorf("log = %q, want one warning that the lock on %s was lost", out, key)
	}
}

// A panicking Observer reaches the caller on the caller's goroutine, as in
// package cache; on the keep-alive's goroutine it is recovered and logged,
// and the lock is still kept alive.
func TestClient_Observer_panics(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	var buf syncBuffer
	refreshes := make(chan struct{}, 2)
	panics := redistest.Key(t, "panics")
	c, rc := newClient(t, s, &lock.Options{
		Logger: slog.New(slog.NewTextHandler(&buf, nil)),
		Observer: func(e lock.Event) {
			switch e.Kind {
			case lock.EventObtained:
				if e.Key == panics {
					panic("observer")
				}
			case lock.EventRefreshed:
				select {
				case refreshes <- struct{}{}:
				default:
				}
				panic("observer")
			}
		},
	})

	func() {
		defer func() {
			if r := recover(); r != "observer" {
				t.Errorf("Obtain recovered %v, want the Observer's panic", r)
			}
		}()
		_, _ = c.Obtain(ctx, panics, time.Second)
	}()
	rc.Del(ctx, panics) // the lock Obtain took before it panicked

	key := redistest.Key(t, "lock")
	err := c.Do(ctx, key, time.Second, func(wctx context.Context) error {
		for range 2 { // two refreshes: the first panic did not stop the keep-alive
			select {
			case <-refreshes:
			case <-wctx.Done():
				return context.Cause(wctx)
			}
		}
		return nil
	}, lock.WithRefreshEvery(20*time.Millisecond))
	if err != nil {
		t.Fatalf("Do = %v, want nil", err)
	}
	if out := buf.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "Observer panicked") ||
		!strings.Contains(out, "key="+key) {
		t.Errorf("log = %q, want an error naming the key", out)
	}
}
