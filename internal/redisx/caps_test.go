package redisx_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// TestConn_probeTransient: a probe that meets BUSY fails (the call that
// needed it fails) and is not kept: the next call probes again and finds
// the server's own commands. (It used to settle on the Lua fallbacks for
// the Conn's life, which fail for good under an ACL without scripts.)
func TestConn_probeTransient(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		s = redistest.Start(t, s.Kind) // made busy: not shared
		ctx := t.Context()
		cn := redisx.NewConn(s.Client(t), nil, 0)
		stop := redistest.Busy(t, s.Addrs()[0])
		caps, err := cn.Capabilities(ctx)
		stop()
		if err == nil || !strings.Contains(err.Error(), "BUSY") {
			t.Errorf("probe of a busy server: %v, %v; want its BUSY", caps, err)
		}
		caps, err = cn.Capabilities(ctx)
		if err != nil || caps.Release == redisx.ReleaseLua || caps.Extend == redisx.ExtendLua {
			t.Errorf("after the server answered again: %v, %v; want its own commands", caps, err)
		}
	}, redistest.Redis8, redistest.Valkey)
}

// TestConn_refusalRechecked: scripts refused by the ACL are remembered,
// and learnt again after Recheck: once the operator grants them, the
// Conn runs them without a restart.
func TestConn_refusalRechecked(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := t.Context()
		prefix := strings.ReplaceAll(redistest.Key(t, ""), "/", ":")
		rules := append(redistest.ConnPerms(s.Kind), "~"+prefix+"*", "+get", "+set", "+del")
		u := s.User(t, rules...)
		cn := redisx.NewConn(u.Client(t), nil, 0)
		caps, err := cn.CapabilitiesFor(ctx, prefix+"k")
		if err != nil || caps.ScriptsDenied == "" {
			t.Fatalf("capabilities %+v, %v: want scripts denied", caps, err)
		}
		if err := cn.Check(ctx, prefix+"k", redisx.OpRelease, 1<<20); !errors.Is(err, redisx.ErrPermission) {
			t.Fatalf("Check of a large release: %v, want ErrPermission", err)
		}
		if err := u.Set(append(rules, "+evalsha", "+eval")...); err != nil {
			t.Fatal(err)
		}
		cn.SetRecheck(time.Nanosecond) // what was learnt is now older than that
		if err := cn.Check(ctx, prefix+"k", redisx.OpRelease, 1<<20); err != nil {
			t.Errorf("Check after scripts were granted: %v", err)
		}
		if caps, err := cn.CapabilitiesFor(ctx, prefix+"k"); err != nil || caps.ScriptsDenied != "" {
			t.Errorf("capabilities %+v, %v: want scripts no longer denied", caps, err)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey)
}

// probeHold is a client hook that counts the capability probes (the
// pipeline that begins with HELLO) and, once armed, holds the next one
// until release or, failing that, until holdBound has passed.
type probeHold struct {
	probes  atomic.Int32
	armed   atomic.Bool
	started chan struct{} // closed when the held probe reaches the hook
	release chan struct{} // closed by the test
	held    chan bool     // the held probe's verdict: released by the test (true) or by the bound
	done    chan struct{} // closed when the held probe has its replies
}

// holdBound only ends a test that would otherwise hang: a passing test
// releases the probe as soon as the call under test returns.
const holdBound = 10 * time.Second

func newProbeHold() *probeHold {
	return &probeHold{started: make(chan struct{}), release: make(chan struct{}), held: make(chan bool, 1), done: make(chan struct{})}
}

func (h *probeHold) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *probeHold) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *probeHold) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 0 || cmds[0].Name() != "hello" {
			return next(ctx, cmds)
		}
		h.probes.Add(1)
		if !h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmds)
		}
		close(h.started)
		t := time.NewTimer(holdBound)
		defer t.Stop()
		select {
		case <-h.release:
			h.held <- true
		case <-t.C:
			h.held <- false
		}
		defer close(h.done)
		return next(ctx, cmds)
	}
}

// heldConn returns a Conn on a client of s with a probeHold hook, and
// the capabilities its first probe found.
func heldConn(t *testing.T, s *redistest.Server) (*redisx.Conn, *probeHold, redisx.Capabilities, error) {
	rc := s.Client(t)
	h := newProbeHold()
	rc.AddHook(h)
	cn := redisx.NewConn(rc, nil, 0)
	caps, err := cn.Capabilities(t.Context())
	return cn, h, caps, err
}

// TestConn_recheckBesideTheCall: once Recheck has passed, a Conn with
// nothing refused or downgraded probes the server beside the call that
// found it due: the call returns what was learnt without waiting for the
// probe's round trip, and the probe's answer stands for the next
// Recheck. (With a refusal remembered the probe comes first, in the
// call: TestConn_refusalRechecked; with a downgrade, see below.)
func TestConn_recheckBesideTheCall(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := t.Context()
		cn, h, first, err := heldConn(t, s)
		if err != nil || first.ScriptsDenied != "" || first.ACLRefused != "" {
			t.Fatalf("capabilities %+v, %v: want nothing refused", first, err)
		}
		h.armed.Store(true)
		cn.SetRecheck(time.Nanosecond)
		caps, err := cn.Capabilities(ctx)
		close(h.release)
		if err != nil || caps != first {
			t.Errorf("the call that found the capabilities due: %+v, %v; want what was learnt, %+v", caps, err, first)
		}
		if !<-h.held {
			t.Fatalf("the call returned only after the re-probe (held %v): it waited for its round trip", holdBound)
		}
		<-h.done
		cn.SetRecheck(time.Minute)
		if caps, err := cn.Capabilities(ctx); err != nil || caps != first {
			t.Errorf("after the re-probe: %+v, %v; want %+v", caps, err, first)
		}
		if n := h.probes.Load(); n != 2 {
			t.Errorf("%d probes; want 2 (the first, the re-probe; the re-probe's answer is fresh for a Recheck)", n)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestConn_recheckLiftsDowngrade: a downgrade (a refused SET IFEQ made
// the Conn extend with Lua) is probed again in the call that finds it
// due, so that call already uses the server's own command.
func TestConn_recheckLiftsDowngrade(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := t.Context()
		cn, h, first, err := heldConn(t, s)
		if err != nil || first.Extend != redisx.ExtendSetIfEq {
			t.Fatalf("capabilities %+v, %v: want SET IFEQ", first, err)
		}
		cn.DowngradeExtend()
		if caps, _ := cn.Capabilities(ctx); caps.Extend != redisx.ExtendLua {
			t.Fatalf("after the downgrade: %+v; want the Lua extension until Recheck", caps)
		}
		h.armed.Store(true)
		cn.SetRecheck(time.Nanosecond)
		got := make(chan redisx.Capabilities, 1)
		go func() {
			caps, _ := cn.Capabilities(ctx)
			got <- caps
		}()
		select {
		case caps := <-got:
			t.Fatalf("the call returned %+v before its re-probe ran; want the probe first", caps)
		case <-h.started: // the call waits for it (the probe is held)
		}
		close(h.release)
		if ok := <-h.held; !ok {
			t.Errorf("the re-probe was held for %v", holdBound)
		}
		if caps := <-got; caps.Extend != redisx.ExtendSetIfEq {
			t.Errorf("the call that found the capabilities due: %+v; want SET IFEQ again", caps)
		}
	}, redistest.Redis8, redistest.Valkey)
}
