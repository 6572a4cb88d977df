package lock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/faultproxy"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// This file tests every lock call on connections that fail while they
// are set up, or right after: a wrong password, a database that does not
// exist, a server that closes the connection after the handshake. go-redis
// returns such a failure from a pipeline's Exec and sets it on none of its
// commands.

// setupFaulty is a client whose connections can be made to fail as they
// are set up. Each command takes a new connection (ConnMaxLifetime 1ns),
// so a fault meets the next call, also one on a lock obtained before it.
type setupFaulty struct {
	rc    *redis.Client
	u     *redistest.User
	proxy *faultproxy.Proxy
	db99  atomic.Bool // OnConnect selects database 99, as Options.DB 99 would
}

func newSetupFaulty(tb testing.TB, s *redistest.Server) *setupFaulty {
	tb.Helper()
	p, err := faultproxy.Start(s.Addrs()[0])
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	f := &setupFaulty{u: s.User(tb, "~*", "&*", "+@all"), proxy: p}
	f.rc = redis.NewClient(&redis.Options{
		Addr: p.Addr(), Username: f.u.Name, Password: f.u.Password,
		MaxRetries: -1, DisableIdentity: true, ConnMaxLifetime: time.Nanosecond,
		OnConnect: func(ctx context.Context, cn *redis.Conn) error {
			if f.db99.Load() {
				return cn.Select(ctx, 99).Err()
			}
			return nil
		},
	})
	tb.Cleanup(func() { _ = f.rc.Close() })
	return f
}

// lockSetupFaults are the faults, each with the server's reply that the
// error must carry ("" for a broken connection: any error).
var lockSetupFaults = []struct {
	name, reply string
	apply       func(tb testing.TB, f *setupFaulty)
}{
	{"wrong password", "WRONGPASS", func(tb testing.TB, f *setupFaulty) {
		f.u.Password += "-changed" // the client keeps the old one
		if err := f.u.Set("~*", "&*", "+@all"); err != nil {
			tb.Fatal(err)
		}
	}},
	{"DB 99", "ERR DB index is out of range", func(_ testing.TB, f *setupFaulty) { f.db99.Store(true) }},
	{"closed after handshake", "", func(_ testing.TB, f *setupFaulty) { f.proxy.CloseAfter(1) }},
}

// TestClient_setupFaults runs every lock call against every setup fault:
// each fails with an error that carries the server's reply, never with
// ErrNotHeld or ErrForeignValue as if the server had answered.
func TestClient_setupFaults(t *testing.T) {
	calls := []struct {
		name string
		held bool // called on a lock obtained before the fault
		call func(ctx context.Context, c *lock.Client, l *lock.Lock, key string) error
	}{
		{"Obtain", false, func(ctx context.Context, c *lock.Client, _ *lock.Lock, key string) error {
			_, err := c.Obtain(ctx, key, time.Minute)
			return err
		}},
		{"Do", false, func(ctx context.Context, c *lock.Client, _ *lock.Lock, key string) error {
			return c.Do(ctx, key, time.Minute, func(context.Context) error { return nil })
		}},
		{"RunOnce", false, func(ctx context.Context, c *lock.Client, _ *lock.Lock, key string) error {
			_, err := c.RunOnce(ctx, key, time.Minute, func(context.Context) error { return nil })
			return err
		}},
		{"Inspect", false, func(ctx context.Context, c *lock.Client, _ *lock.Lock, key string) error {
			_, err := c.Inspect(ctx, key)
			return err
		}},
		{"Capabilities", false, func(ctx context.Context, c *lock.Client, _ *lock.Lock, _ string) error {
			_, err := c.Capabilities(ctx)
			return err
		}},
		{"Release", true, func(ctx context.Context, _ *lock.Client, l *lock.Lock, _ string) error {
			return l.Release(ctx)
		}},
		{"Refresh", true, func(ctx context.Context, _ *lock.Client, l *lock.Lock, _ string) error {
			return l.Refresh(ctx, time.Minute)
		}},
		{"TTL", true, func(ctx context.Context, _ *lock.Client, l *lock.Lock, _ string) error {
			_, err := l.TTL(ctx)
			return err
		}},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, fault := range lockSetupFaults {
			t.Run(fault.name, func(t *testing.T) {
				for _, tc := range calls {
					t.Run(tc.name, func(t *testing.T) {
						ctx := testCtx(t)
						f := newSetupFaulty(t, s)
						c, err := lock.New(f.rc, nil)
						if err != nil {
							t.Fatal(err)
						}
						key := redistest.Key(t, "lock")
						var l *lock.Lock
						if tc.held {
							if l, err = c.Obtain(ctx, key, time.Minute); err != nil {
								t.Fatal(err)
							}
						}
						fault.apply(t, f)
						err = tc.call(ctx, c, l, key)
						var re redis.Error
						switch {
						case err == nil:
							t.Fatal("no error")
						case errors.Is(err, lock.ErrNotHeld), errors.Is(err, lock.ErrForeignValue):
							t.Fatalf("an answer, not the failure: %v", err)
						case fault.reply != "" && (!strings.Contains(err.Error(), fault.reply) || !errors.As(err, &re)):
							t.Fatalf("error %v (%T) does not carry the server's reply %q", err, err, fault.reply)
						}
					})
				}
			})
		}
	}, redistest.Redis8, redistest.Valkey)
}

// TestClient_capabilitiesAfterWrongPassword: a probe that met a wrong
// password is no answer. Once the password is right, the same Client
// reports what a new one does, not the Lua fallbacks for good.
func TestClient_capabilitiesAfterWrongPassword(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		f := newSetupFaulty(t, s)
		c, err := lock.New(f.rc, nil)
		if err != nil {
			t.Fatal(err)
		}
		lockSetupFaults[0].apply(t, f)
		if caps, err := c.Capabilities(ctx); err == nil {
			t.Fatalf("Capabilities with a wrong password: %v, no error", caps)
		}
		if _, err := c.Obtain(ctx, redistest.Key(t, "lock"), time.Minute); err == nil {
			t.Fatal("Obtain with a wrong password: no error")
		}
		// The operator puts the old password back.
		f.u.Password = strings.TrimSuffix(f.u.Password, "-changed")
		if err := f.u.Set("~*", "&*", "+@all"); err != nil {
			t.Fatal(err)
		}
		got, err := c.Capabilities(ctx)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := lock.New(f.rc, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, err := fresh.Capabilities(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("after the password was fixed: %v; a new Client: %v", got, want)
		}
	}, redistest.Redis8, redistest.Valkey)
}
