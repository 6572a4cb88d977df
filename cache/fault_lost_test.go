package cache_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// dialGate is a client hook that holds back new connections while shut:
// the first one held is told on reached, and all go on once open is
// called (or at cleanup).
type dialGate struct {
	shut    atomic.Bool
	reached chan struct{}
	release <-chan struct{}
	open    func()
}

func newDialGate(t *testing.T, rc redis.UniversalClient) *dialGate {
	release, open := gate(t)
	g := &dialGate{reached: make(chan struct{}, 1), release: release, open: open}
	rc.AddHook(g)
	return g
}

func (g *dialGate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if g.shut.Load() {
			select {
			case g.reached <- struct{}{}:
			default:
			}
			<-g.release
		}
		return next(ctx, network, addr)
	}
}

func (g *dialGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *dialGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestAnnounce_subscriptionLostWhileWaiting: a waiter whose subscription
// was confirmed before its read (every announcement reaches it) loses its
// subscription's connection, and the rebuild it waits for announces its
// value before the subscription is back: the waiter reads again once it
// is back and has the value, rather than waiting for its poll. (Before:
// it went on waiting for a message that had reached nobody, and woke by
// its poll; a busy machine whose pub/sub connections time out loses
// wake-ups this way.)
func TestAnnounce_subscriptionLostWhileWaiting(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		a := newCacheOn(t, s.Client(t), &cache.Options{Namespace: ns})
		rcb := s.Client(t)
		dials := newDialGate(t, rcb)
		// The poll lies beyond the test: only a read after the
		// subscription is back can answer in time.
		b := newCacheOn(t, rcb, &cache.Options{Namespace: ns, PollInterval: 2 * time.Minute, WaitTimeout: 3 * time.Minute})

		started := make(chan struct{})
		release, let := gate(t)
		holder := goGetOrLoad(ctx, a, "k", func(context.Context) (string, error) {
			close(started)
			<-release
			return "v", nil
		})
		redistest.Recv(t, ctx, started, "cache a to claim the key and load")
		var calls atomic.Int32
		waiter := goGetOrLoad(ctx, b, "k", neverLoad[string](&calls))
		redistest.WaitFor(t, ctx, "cache b to wait, subscribed", func() bool { return cache.CoveredWaits(b) > 0 })

		// b's subscription connection breaks, and stays away until a has
		// announced.
		dials.shut.Store(true)
		if err := s.Client(t).Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		redistest.Recv(t, ctx, dials.reached, "cache b to dial its subscription again")
		let()
		if r := redistest.Recv(t, ctx, holder, "cache a"); r.err != nil || r.v != "v" {
			t.Fatalf("cache a: %q, %v", r.v, r.err)
		}
		dials.open()

		r := redistest.Recv(t, ctx, waiter, "cache b (its poll is two minutes away)")
		if r.err != nil || r.v != "v" || calls.Load() != 0 {
			t.Errorf("cache b: %q, %v, %d loads of its own; want a's value and no load", r.v, r.err, calls.Load())
		}
		if cache.LostWaits(b) == 0 {
			t.Errorf("no wait of cache b ended with its subscription's connection")
		}
	}, redistest.Redis8, redistest.Valkey)
}
