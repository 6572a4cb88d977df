package cache_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// probeGate is a client hook that, once armed, holds the next capability
// probe (the pipeline that begins with HELLO) until the probe's context
// ends or, failing that, until probeGateBound has passed.
type probeGate struct {
	armed   atomic.Bool
	started chan struct{} // closed when the held probe reaches the hook
	ended   chan bool     // the held probe's end: by its context (true) or by the bound
	done    chan struct{} // closed as the hook returns the held probe's error
}

// probeGateBound only ends a test that would otherwise hang: the probe
// under test ends when Close cancels it.
const probeGateBound = 10 * time.Second

func newProbeGate() *probeGate {
	return &probeGate{started: make(chan struct{}), ended: make(chan bool, 1), done: make(chan struct{})}
}

func (g *probeGate) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (g *probeGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *probeGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != "hello" || !g.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		defer close(g.done)
		close(g.started)
		bound := time.NewTimer(probeGateBound)
		defer bound.Stop()
		select {
		case <-ctx.Done():
			g.ended <- true
			return ctx.Err()
		case <-bound.C:
			g.ended <- false
			return next(ctx, cmds)
		}
	}
}

// TestCache_Close_reprobe: a call that finds what the server offers due
// for a re-probe (every Recheck) runs the probe beside itself, in the
// background; Close cancels that probe and returns only after it ended,
// leaving no goroutine of it behind.
func TestCache_Close_reprobe(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		rc := s.Client(t)
		g := newProbeGate()
		rc.AddHook(g)
		c, err := cache.NewRecheck(rc, &cache.Options{Namespace: namespace(t)}, time.Nanosecond)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Capabilities(ctx); err != nil { // the first probe, in the call
			t.Fatal(err)
		}
		before := goleak.IgnoreCurrent()
		g.armed.Store(true)
		if _, err := c.Capabilities(ctx); err != nil { // due again: probed beside the call
			t.Fatal(err)
		}
		select {
		case <-g.started:
		case <-ctx.Done():
			t.Fatal("no re-probe started")
		}

		c.Close()
		select {
		case <-g.done:
		default:
			t.Fatal("Close returned while the re-probe it started was still running")
		}
		if !<-g.ended {
			t.Errorf("the re-probe ran for %v: Close did not cancel it", probeGateBound)
		}
		// goleak retries until the goroutines it finds are gone. Only the
		// Conn's concern this test; the client's are its cleanup's.
		if err := goleak.Find(before); err != nil && strings.Contains(err.Error(), "internal/redisx.(*Conn)") {
			t.Errorf("a goroutine of the re-probe outlived Close: %v", err)
		}
	}, redistest.Redis8, redistest.Valkey, redistest.Miniredis)
}
