package cache_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// TestTracking_transientReply: a BUSY answer to the tracker's CLIENT ID
// while the Cache starts is not a refusal: nothing says the server refused
// CLIENT TRACKING, and once the server answers again the near cache turns
// on. (It used to stay off for the Cache's life, with a warning that the
// server had refused CLIENT TRACKING.)
func TestTracking_transientReply(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		s = redistest.Start(t, s.Kind) // made busy: not shared
		ctx := testCtx(t)
		logs := newLogSink()
		stop := redistest.Busy(t, s.Addrs()[0])
		c, err := cache.New(s.Client(t), &cache.Options{Namespace: namespace(t), Near: &cache.Near{MaxEntries: 100}, Logger: slog.New(logs)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		logs.waitLog(t, ctx, "near cache", "BUSY")
		stop()
		for _, m := range logs.all() {
			if strings.Contains(m, "refused") {
				t.Errorf("a BUSY reply was logged as a refusal: %s", m)
			}
		}
		if caps, err := c.Capabilities(ctx); err != nil || caps.NearDenied != "" {
			t.Errorf("capabilities %+v, %v: want tracking not denied", caps, err)
		}
		redistest.WaitFor(t, ctx, "the near cache to turn on once the server answers", c.NearActive)
	}, redistest.Redis8, redistest.Valkey)
}

// TestTracking_refusalRechecked: CLIENT TRACKING refused by the ACL keeps
// the near cache off, said by Capabilities and a warning naming the
// reply; the tracker asks again later, so once the operator grants it the
// near cache turns on without a restart, and a line says so.
func TestTracking_refusalRechecked(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		perms := redistest.CachePerms(s.Kind, ns)
		u := s.User(t, perms...)
		logs := newLogSink()
		c, err := cache.NewRecheck(u.Client(t), &cache.Options{Namespace: ns, Near: &cache.Near{MaxEntries: 100}, Logger: slog.New(logs)}, 20*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		logs.waitLog(t, ctx, "near cache off", "NOPERM")
		if caps, err := c.Capabilities(ctx); err != nil || !strings.Contains(caps.NearDenied, "NOPERM") {
			t.Fatalf("capabilities %+v, %v: want the refusal of tracking, with its reply", caps, err)
		}
		if err := u.Set(append(perms, redistest.NearPerms()...)...); err != nil {
			t.Fatal(err)
		}
		redistest.WaitFor(t, ctx, "the near cache to turn on once tracking is granted", c.NearActive)
		logs.waitLog(t, ctx, "near cache on again")
		if caps, err := c.Capabilities(ctx); err != nil || caps.NearDenied != "" {
			t.Errorf("capabilities %+v, %v: want tracking no longer denied", caps, err)
		}
	}, redistest.Redis8, redistest.Valkey)
}

// all returns the messages logged so far.
func (l *logSink) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}
