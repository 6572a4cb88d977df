package stampedeotel_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/hotkv/stampede/metrics/metricstest"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/codes"
)

// twoCaches returns two Caches of one namespace on clients of their own,
// named and observed "a" and "b": two processes, as far as the server can
// tell. They are closed when the test ends.
func twoCaches(tb testing.TB, s *redistest.Server, b *bed) (a, w *cache.Cache) {
	tb.Helper()
	ns := redistest.Key(tb, "ns")
	newCache := func(name string) *cache.Cache {
		c, err := cache.New(s.NewClient(), &cache.Options{Namespace: ns, Observer: b.tel.CacheObserver(name)})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close() })
		return c
	}
	return newCache("a"), newCache("b")
}

// holdLoad starts a GetOrLoad of key in c on ctx whose loader returns v
// once release is called, and returns when the loader runs; done gets
// the call's error. The load is released when the test ends, at the
// latest.
func holdLoad(tb testing.TB, ctx context.Context, c *cache.Cache, key, v string) (release func(), done <-chan error) {
	tb.Helper()
	started, gate := make(chan struct{}), make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		_, err := cache.GetOrLoad(ctx, c, key, func(lctx context.Context) (string, error) {
			close(started)
			select {
			case <-gate:
				return v, nil
			case <-lctx.Done():
				return "", lctx.Err()
			}
		})
		errs <- err
	}()
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	tb.Cleanup(release)
	redistest.Recv(tb, ctx, started, "the load to start")
	return release, errs
}

// deadClient returns a client of an address where nothing listens.
func deadClient(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	tb.Cleanup(func() { _ = rc.Close() })
	return rc
}

// The spans of a load, a wait and an Obtain are children of the span of
// the call they belong to: a GetOrLoad miss's load; the wait of a call of
// a second Cache (another process) for that load; an Obtain.
func TestObservers_spanParents(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := metricstest.Context(t)
	b := newBed(t, nil)
	tracer := b.tp.Tracer("test")
	a, w := twoCaches(t, s, b)

	actx, aspan := tracer.Start(ctx, "a's request")
	release, done := holdLoad(t, actx, a, "k", "v")
	bctx, bspan := tracer.Start(ctx, "b's request")
	waited := make(chan error, 1)
	go func() {
		v, err := cache.GetOrLoad(bctx, w, "k", func(context.Context) (string, error) { return "", errors.New("b loaded") })
		if err == nil && v != "v" {
			err = errors.New("b got " + v)
		}
		waited <- err
	}()
	redistest.WaitFor(t, ctx, "b waiting", func() bool { return w.Stats().Waits == 1 })
	release()
	for _, ch := range []<-chan error{done, waited} {
		if err := redistest.Recv(t, ctx, ch, "GetOrLoad"); err != nil {
			t.Fatal(err)
		}
	}
	aspan.End()
	bspan.End()
	childOf(t, "load", only(t, "load", b.ended("stampede.cache.load")), aspan)
	childOf(t, "wait", only(t, "wait", b.ended("stampede.cache.wait")), bspan)

	locks, err := lock.New(s.Client(t), &lock.Options{Observer: b.tel.LockObserver("jobs")})
	if err != nil {
		t.Fatal(err)
	}
	lctx, lspan := tracer.Start(ctx, "job")
	l, err := locks.Obtain(lctx, redistest.Key(t, "lock"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(lctx); err != nil {
		t.Fatal(err)
	}
	lspan.End()
	childOf(t, "obtain", only(t, "obtain", b.ended("stampede.lock.obtain")), lspan)
}

// A failure's span and the data point of its duration carry error.type:
// a wait that timed out ("timeout"), an Obtain whose server call failed
// (the error's type). (A failed load: TestCacheObserver; a panic:
// TestTraced_CacheObserver.)
func TestObservers_errorType(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := metricstest.Context(t)
	b := newBed(t, nil)
	a, w := twoCaches(t, s, b)

	release, done := holdLoad(t, ctx, a, "k", "v")
	_, err := cache.GetOrLoad(ctx, w, "k", metricstest.LoadString("b's"), cache.WithWaitTimeout(50*time.Millisecond))
	if !errors.Is(err, cache.ErrWaitTimeout) {
		t.Fatalf("GetOrLoad = %v, want ErrWaitTimeout", err)
	}
	release()
	if err := redistest.Recv(t, ctx, done, "a's GetOrLoad"); err != nil {
		t.Fatal(err)
	}
	const waits = "stampede.cache.wait.duration"
	b.want(t, 1, waits, cacheAttr("b"), result("timeout"), errType("timeout"))
	b.want(t, -1, waits, cacheAttr("b"), result("timeout"))
	if s := only(t, "wait", b.ended("stampede.cache.wait")); attr(s, "error.type") != "timeout" || s.Status().Code != codes.Error {
		t.Errorf("wait span error.type %q, status %v; want timeout, Error", attr(s, "error.type"), s.Status())
	}

	locks, err := lock.New(deadClient(t), &lock.Options{Observer: b.tel.LockObserver("jobs")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locks.Obtain(ctx, "job", time.Minute); err == nil || errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("Obtain on a dead server = %v, want its error", err)
	}
	const obtain = "stampede.lock.obtain.duration"
	b.want(t, 1, obtain, lockAttr("jobs"), result("obtain-failed"), errType("*net.OpError"))
	b.want(t, -1, obtain, lockAttr("jobs"), result("obtain-failed"))
	if s := only(t, "obtain", b.ended("stampede.lock.obtain")); attr(s, "error.type") != "*net.OpError" || s.Status().Code != codes.Error {
		t.Errorf("obtain span error.type %q, status %v; want *net.OpError, Error", attr(s, "error.type"), s.Status())
	}
}
