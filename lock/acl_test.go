package lock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
)

// aclPrefix is a key prefix unique to tb, for an ACL key pattern.
func aclPrefix(tb testing.TB) string {
	return strings.NewReplacer("/", ":", " ", "_").Replace(redistest.Key(tb, ""))
}

// TestACL_lock_leastPrivilege runs Obtain, TTL, Refresh, Inspect and
// Release as a user holding exactly LockPerms, with a small value and with
// one above the digest threshold (large metadata). On Valkey, which
// compares large values only in a script, the large lock is refused up
// front with ErrPermission and nothing is left behind.
func TestACL_lock_leastPrivilege(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		prefix := aclPrefix(t)
		u := s.User(t, redistest.LockPerms(s.Kind, prefix+"*")...)
		c, err := lock.New(u.Client(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		admin := s.Client(t)
		for _, meta := range []string{"", strings.Repeat("m", 1000)} {
			key := prefix + "k" + string(rune('0'+len(meta)%10))
			l, err := c.Obtain(ctx, key, time.Minute, lock.WithMetadata(meta))
			if s.Kind == redistest.Valkey && meta != "" {
				if !errors.Is(err, lock.ErrPermission) {
					t.Fatalf("large lock on valkey without scripts: %v, want ErrPermission", err)
				}
				if n, _ := admin.Exists(ctx, key).Result(); n != 0 {
					t.Fatalf("refused Obtain left %s behind", key)
				}
				continue
			}
			if err != nil {
				t.Fatalf("obtain (metadata %d bytes): %v", len(meta), err)
			}
			if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 {
				t.Fatalf("ttl: %v, %v", ttl, err)
			}
			if err := l.Refresh(ctx, 2*time.Minute); err != nil {
				t.Fatalf("refresh: %v", err)
			}
			if info, err := c.Inspect(ctx, key); err != nil || info.Metadata != meta || info.TTL <= time.Minute {
				t.Fatalf("inspect: %+v, %v", info, err)
			}
			if _, err := c.Obtain(ctx, key, time.Minute); !errors.Is(err, lock.ErrNotObtained) {
				t.Fatalf("second obtain: %v, want ErrNotObtained", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("release: %v", err)
			}
			if _, err := l.TTL(ctx); !errors.Is(err, lock.ErrNotHeld) {
				t.Fatalf("ttl after release: %v, want ErrNotHeld", err)
			}
			if err := l.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
				t.Fatalf("second release: %v, want ErrNotHeld", err)
			}
		}

		// Fencing adds FencePerms.
		if _, err := c.Obtain(ctx, prefix+"f", time.Minute, lock.WithFencing()); !errors.Is(err, lock.ErrPermission) {
			t.Errorf("fenced obtain without FencePerms: %v, want ErrPermission", err)
		}
		fu := s.User(t, append(redistest.LockPerms(s.Kind, prefix+"*"), redistest.FencePerms(prefix+"*")...)...)
		fc, err := lock.New(fu.Client(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		var last int64
		for i := range 2 {
			l, err := fc.Obtain(ctx, prefix+"fenced", time.Minute, lock.WithFencing())
			if err != nil {
				t.Fatalf("fenced obtain %d: %v", i, err)
			}
			if l.Fence() <= last {
				t.Errorf("fence %d after %d", l.Fence(), last)
			}
			last = l.Fence()
			if err := l.Release(ctx); err != nil {
				t.Fatalf("fenced release: %v", err)
			}
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestACL_lock_scriptsDenied (issue 10, defect 17): on Redis 7 with
// -@scripting a lock could be taken (SET NX) but never released or
// refreshed. Obtain refuses at once with ErrPermission naming the refused
// command and what would work, and takes nothing; a lock taken before
// scripting was taken away fails to release with ErrPermission, not an
// anonymous error, and the next Obtain is refused before it takes one.
func TestACL_lock_scriptsDenied(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis7)
	ctx := testCtx(t)
	prefix := aclPrefix(t)
	perms := redistest.LockPerms(s.Kind, prefix+"*")
	admin := s.Client(t)

	t.Run("up front", func(t *testing.T) {
		u := s.User(t, append(perms, "-@scripting")...)
		c, err := lock.New(u.Client(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, fencing := range []bool{false, true} {
			key := prefix + "up"
			var opt lock.ObtainOption // nil: skipped
			if fencing {
				opt = lock.WithFencing()
			}
			_, err := c.Obtain(ctx, key, time.Minute, opt)
			if !errors.Is(err, lock.ErrPermission) || !strings.Contains(err.Error(), "evalsha") {
				t.Errorf("obtain (fencing %t): %v, want ErrPermission naming evalsha", fencing, err)
			}
			if !fencing && err != nil && !strings.Contains(err.Error(), "DELEX") {
				t.Errorf("obtain: %v, want it to name a server that needs no script", err)
			}
			if n, _ := admin.Exists(ctx, key).Result(); n != 0 {
				t.Errorf("refused Obtain left %s behind", key)
			}
		}
		caps, err := c.Capabilities(ctx)
		if err != nil || caps.ScriptsDenied == "" || !strings.Contains(caps.String(), "scripts=denied") {
			t.Errorf("capabilities %v, %v: want scripts denied", caps, err)
		}
	})

	t.Run("revoked while held", func(t *testing.T) {
		u := s.User(t, perms...)
		c, err := lock.New(u.Client(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.Obtain(ctx, prefix+"held", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := u.Set(append(perms, "-@scripting")...); err != nil {
			t.Fatal(err)
		}
		if err := l.Refresh(ctx, time.Minute); !errors.Is(err, lock.ErrPermission) {
			t.Errorf("refresh: %v, want ErrPermission", err)
		}
		if err := l.Release(ctx); !errors.Is(err, lock.ErrPermission) || !strings.Contains(err.Error(), "DELEX") {
			t.Errorf("release: %v, want ErrPermission naming what would work", err)
		}
		// TTL needs no script.
		if ttl, err := l.TTL(ctx); err != nil || ttl <= 0 {
			t.Errorf("ttl: %v, %v", ttl, err)
		}
		if _, err := c.Obtain(ctx, prefix+"next", time.Minute); !errors.Is(err, lock.ErrPermission) {
			t.Errorf("next obtain: %v, want ErrPermission", err)
		}
		if n, _ := admin.Exists(ctx, prefix+"next").Result(); n != 0 {
			t.Errorf("refused Obtain left a lock behind")
		}
	})
}

// TestACL_lock_permissionRemoved: a user lacking one command that the
// docs/permissions.md lists gets ErrPermission naming it, and no lock is
// left.
func TestACL_lock_permissionRemoved(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind redistest.Kind
		drop string
		want string
	}{
		{name: "redis8 without delex", kind: redistest.Redis8, drop: "+delex", want: "+delex"},
		{name: "valkey without delifeq", kind: redistest.Valkey, drop: "+delifeq", want: "+delifeq"},
		{name: "redis7 without evalsha", kind: redistest.Redis7, drop: "+evalsha", want: "evalsha"},
		{name: "redis8 without set", kind: redistest.Redis8, drop: "+set", want: "set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Shared(t, tc.kind)
			ctx := testCtx(t)
			prefix := aclPrefix(t)
			var perms []string
			for _, p := range redistest.LockPerms(s.Kind, prefix+"*") {
				if p != tc.drop {
					perms = append(perms, p)
				}
			}
			u := s.User(t, perms...)
			c, err := lock.New(u.Client(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Obtain(ctx, prefix+"k", time.Minute)
			t.Log(err)
			if !errors.Is(err, lock.ErrPermission) || !strings.Contains(strings.ToLower(err.Error()), tc.want) {
				t.Errorf("obtain: %v, want ErrPermission naming %q", err, tc.want)
			}
			if n, _ := s.Client(t).Exists(ctx, prefix+"k").Result(); n != 0 {
				t.Errorf("refused Obtain left a lock behind")
			}
		})
	}
}

// A user holding exactly SemaphorePerms acquires, refreshes and releases
// permits, and a waiter whose poll is an hour is woken by a release (the
// channel is granted); without a command the script calls, TryAcquire
// returns ErrPermission naming the semaphore.
func TestACL_semaphore(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		prefix := aclPrefix(t)
		u := s.User(t, append(redistest.ConnPerms(s.Kind), redistest.SemaphorePerms(prefix+"*")...)...)
		c, err := lock.New(u.Client(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		sem := newSemaphore(t, c, prefix+"sem", 1, time.Minute, lock.WithPollInterval(time.Hour))
		p, err := sem.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Refresh(ctx, time.Minute); err != nil {
			t.Fatalf("refresh: %v", err)
		}
		got := make(chan error, 1)
		go func() {
			q, err := sem.Acquire(ctx)
			if err == nil {
				err = q.Release(ctx)
			}
			got <- err
		}()
		redistest.WaitFor(t, ctx, "the waiter to wait for a notice", func() bool { return lock.SemArmed(c, sem) == 1 })
		if err := p.Release(ctx); err != nil {
			t.Fatalf("release: %v", err)
		}
		if err := redistest.Recv(t, ctx, got, "the woken waiter"); err != nil {
			t.Fatal(err)
		}

		var fewer []string
		for _, r := range redistest.SemaphorePerms(prefix + "*") {
			if r != "+zremrangebyscore" {
				fewer = append(fewer, r)
			}
		}
		nu := s.User(t, append(redistest.ConnPerms(s.Kind), fewer...)...)
		nc, err := lock.New(nu.Client(t), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		nsem := newSemaphore(t, nc, prefix+"sem", 1, time.Minute)
		if _, err := nsem.TryAcquire(ctx); !errors.Is(err, lock.ErrPermission) || !strings.Contains(err.Error(), prefix+"sem") {
			t.Errorf("TryAcquire without +zremrangebyscore: %v, want ErrPermission naming the semaphore", err)
		}
	})
}

// TestACL_lock_replaceAndPublish: ReplaceAndPublish as a user holding
// LockPerms on Redis 8.6 (no scripting) replaces the lock as Replace does
// and says that nothing was published (ErrNotPublished, not a refusal); a
// user also allowed scripts, but not SPUBLISH, has the value written by
// the script and the publish's refusal as ErrNotPublished and
// ErrPermission; with SPUBLISH too, it publishes.
func TestACL_lock_replaceAndPublish(t *testing.T) {
	for _, tc := range []struct {
		name    string
		extra   []string
		want    error // besides ErrNotPublished, or nil for a publish
		refused bool  // the error matches ErrPermission
	}{
		{name: "no scripts", want: lock.ErrNotPublished},
		{name: "scripts, no publish", extra: []string{"+evalsha", "+eval"}, want: lock.ErrNotPublished, refused: true},
		{name: "scripts and publish", extra: []string{"+evalsha", "+eval", "+spublish"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := redistest.Shared(t, redistest.Redis8)
			ctx := testCtx(t)
			prefix := aclPrefix(t)
			key := "{" + prefix + "}"
			perms := append(redistest.LockPerms(s.Kind, "{"+prefix+"*"), "&{"+prefix+"*")
			c, err := lock.New(s.User(t, append(perms, tc.extra...)...).Client(t), nil)
			if err != nil {
				t.Fatal(err)
			}
			admin := s.Client(t)
			next := redistest.Subscribe(t, ctx, admin, key+":done", true)
			l, err := c.Obtain(ctx, key, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			err = l.ReplaceAndPublish(ctx, "result", time.Hour, key+":done", "stored", true)
			if !errors.Is(err, tc.want) || tc.want == nil && err != nil || errors.Is(err, lock.ErrPermission) != tc.refused {
				t.Fatalf("ReplaceAndPublish = %v; want %v (ErrPermission: %t)", err, tc.want, tc.refused)
			}
			if v, err := admin.Get(ctx, key).Result(); err != nil || v != "result" {
				t.Errorf("the key holds %q, %v; want the result", v, err)
			}
			publish(t, ctx, admin, key+":done", "marker", true)
			first := "marker"
			if tc.want == nil {
				first = "stored"
			}
			if got := next(); got != first {
				t.Errorf("the subscriber received %q first, want %q", got, first)
			}
		})
	}
}
