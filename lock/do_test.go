package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/lock"
)

func TestClient_Do_keepsAlive(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, _ := newClient(t, s, nil)
		key := redistest.Key(t, "lock")
		err := c.Do(ctx, key, 150*time.Millisecond, func(ctx context.Context) error {
			// Work that outlasts the TTL three times over.
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(450 * time.Millisecond):
			}
			l := lock.FromContext(ctx)
			if l == nil || l.Key() != key {
				return errors.New("no lock in the work's context")
			}
			_, err := l.TTL(ctx)
			return err
		}, nil)
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		if _, err := c.Inspect(ctx, key); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("after Do: Inspect = %v, want the lock released", err)
		}
	})
}

func TestClient_Do_lostCancelsWork(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, rc := newClient(t, s, nil)
		key := redistest.Key(t, "lock")
		var cause error
		err := c.Do(ctx, key, 2*time.Second, func(wctx context.Context) error {
			if err := rc.Del(ctx, key).Err(); err != nil { // behind the holder's back
				return err
			}
			<-wctx.Done()
			cause = context.Cause(wctx)
			return wctx.Err()
		}, &lock.DoOptions{RefreshEvery: 20 * time.Millisecond})
		if !errors.Is(cause, lock.ErrLost) {
			t.Errorf("work's cause = %v, want ErrLost", cause)
		}
		if !errors.Is(err, lock.ErrLost) {
			t.Errorf("Do = %v, want ErrLost", err)
		}
	})
}

func TestClient_Do_heldSkipsFn(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	c, _ := newClient(t, s, nil)
	key := redistest.Key(t, "lock")
	l, err := c.Obtain(ctx, key, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	called := false
	err = c.Do(ctx, key, time.Second, func(context.Context) error { called = true; return nil }, nil)
	if !errors.Is(err, lock.ErrNotObtained) || called {
		t.Errorf("Do on a held lock = %v (fn called: %t), want ErrNotObtained without fn", err, called)
	}
}

func TestClient_Do_panicReleases(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	c, _ := newClient(t, s, nil)
	key := redistest.Key(t, "lock")
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_ = c.Do(ctx, key, time.Minute, func(context.Context) error { panic("boom") }, nil)
	}()
	if recovered != "boom" {
		t.Fatalf("recovered %v, want the work's panic", recovered)
	}
	if _, err := c.Inspect(ctx, key); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("after a panic: Inspect = %v, want the lock released", err)
	}
}

func TestClient_Obtain_retry(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	c, _ := newClient(t, s, nil)
	key := redistest.Key(t, "lock")

	t.Run("waits for release", func(t *testing.T) {
		l, err := c.Obtain(ctx, key, time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan error, 1)
		go func() {
			l2, err := c.Obtain(ctx, key, time.Minute, &lock.ObtainOptions{Retry: lock.ExponentialBackoff(time.Millisecond, 10*time.Millisecond), MaxWait: 10 * time.Second})
			if err == nil {
				err = l2.Release(ctx)
			}
			got <- err
		}()
		// The first owner still holds it when it releases, so the waiter
		// cannot have obtained it earlier.
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Errorf("waiter: %v", err)
		}
	})

	t.Run("MaxWait bounds the wait", func(t *testing.T) {
		l, err := c.Obtain(ctx, key, time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		_, err = c.Obtain(ctx, key, time.Minute, &lock.ObtainOptions{Retry: lock.LinearBackoff(5 * time.Millisecond), MaxWait: 30 * time.Millisecond})
		if !errors.Is(err, lock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Obtain = %v, want plain ErrNotObtained", err)
		}
	})

	t.Run("context ends the wait", func(t *testing.T) {
		l, err := c.Obtain(ctx, key, time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		cctx, cancel := context.WithCancel(ctx)
		got := make(chan error, 1)
		go func() {
			_, err := c.Obtain(cctx, key, time.Hour, &lock.ObtainOptions{Retry: lock.LinearBackoff(time.Hour)})
			got <- err
		}()
		cancel()
		err = <-got
		if !errors.Is(err, lock.ErrNotObtained) || !errors.Is(err, context.Canceled) {
			t.Errorf("Obtain = %v, want ErrNotObtained joined with context.Canceled", err)
		}
	})
}
