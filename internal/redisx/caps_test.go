package redisx_test

import (
	"errors"
	"strings"
	"testing"
	"time"

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
