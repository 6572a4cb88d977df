package keysub_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/keysub"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// TestProbe_transientNotKept: a BUSY answer to the probe's SPUBLISH says
// nothing about what the server has: that call answers Unknown (not
// Classic, which a caller would act on), Known stays Unknown, and the next
// call, once the server answers again, finds sharded pub/sub. (It used to
// keep "no" for the process's life: a lock client then announced
// hand-offs with PUBLISH while the others listened with SSUBSCRIBE; and
// then to answer "no" for that call, on which a waiter subscribed with
// SUBSCRIBE for good.)
func TestProbe_transientNotKept(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		s = redistest.Start(t, s.Kind) // made busy: not shared
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		rc := s.Client(t)
		var p keysub.Probe
		stop := redistest.Busy(t, s.Addrs()[0])
		if m := p.Mode(ctx, rc, "probe:{k}"); m != keysub.Unknown {
			t.Fatalf("Mode answered %v while the server answered BUSY, want unknown", m)
		}
		if m := p.Known(); m != keysub.Unknown {
			t.Fatalf("after BUSY, Known is %v, want unknown", m)
		}
		stop()
		if m := p.Mode(ctx, rc, "probe:{k}"); m != keysub.Sharded {
			t.Errorf("after one BUSY, Mode answers %v, want sharded", m)
		}
	}, redistest.Redis8, redistest.Valkey)
}

// renamer sends its commands through a real client, under another name
// while unknown is set, so that the server answers "unknown command" as
// a server without the command does; with fail set it fails them before
// they are sent, as a connection that times out. It counts the commands.
type renamer struct {
	c       redis.UniversalClient
	unknown atomic.Bool
	fail    atomic.Bool
	calls   atomic.Int64
}

func (r *renamer) Do(ctx context.Context, args ...any) *redis.Cmd {
	r.calls.Add(1)
	if r.fail.Load() {
		cmd := redis.NewCmd(ctx, args...)
		cmd.SetErr(errors.New("i/o timeout (the test)"))
		return cmd
	}
	if r.unknown.Load() {
		args = append([]any{"X" + args[0].(string)}, args[1:]...)
	}
	return r.c.Do(ctx, args...)
}

// TestProbe_Mode: the probe's three answers, what each leaves known, and
// what each costs the next call: Sharded is kept for good (no call);
// Classic, a definite refusal, is kept for Recheck; Unknown, any other
// error, is kept for nothing (the next call asks again).
func TestProbe_Mode(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	rc := s.Client(t)
	user := s.User(t, append(redistest.ConnPerms(redistest.Redis8), "&*")...).Client(t) // no +spublish
	for _, tc := range []struct {
		name      string
		c         redis.UniversalClient
		unknown   bool // the server answers "unknown command"
		fail      bool // the call fails before it reaches the server
		want      keysub.Mode
		nextCalls int64 // server calls of a second Mode
	}{
		{name: "sharded", c: rc, want: keysub.Sharded},
		{name: "sharded, SPUBLISH refused by the ACL", c: user, want: keysub.Sharded},
		{name: "classic", c: rc, unknown: true, want: keysub.Classic},
		{name: "unknown", c: rc, fail: true, want: keysub.Unknown, nextCalls: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			r := &renamer{c: tc.c}
			r.unknown.Store(tc.unknown)
			r.fail.Store(tc.fail)
			p := keysub.Probe{Recheck: time.Hour}
			if m := p.Mode(ctx, r, "probe:{k}"); m != tc.want {
				t.Fatalf("Mode: %v, want %v", m, tc.want)
			}
			if m := p.Known(); m != tc.want {
				t.Errorf("Known: %v, want %v", m, tc.want)
			}
			if m := p.Mode(ctx, r, "probe:{k}"); m != tc.want {
				t.Errorf("second Mode: %v, want %v", m, tc.want)
			}
			if n := r.calls.Load() - 1; n != tc.nextCalls {
				t.Errorf("the second Mode made %d server calls, want %d", n, tc.nextCalls)
			}
		})
	}
}

// TestProbe_unknownThenKnown: a probe that answered Unknown answers what
// the server has as soon as it answers, and a Sharded answer is not
// undone by a later refusal (another process's, racing).
func TestProbe_unknownThenKnown(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r := &renamer{c: redistest.Shared(t, redistest.Redis8).Client(t)}
	var p keysub.Probe
	r.fail.Store(true)
	if m := p.Mode(ctx, r, "probe:{k}"); m != keysub.Unknown {
		t.Fatalf("Mode: %v, want unknown", m)
	}
	r.fail.Store(false)
	if m := p.Mode(ctx, r, "probe:{k}"); m != keysub.Sharded {
		t.Fatalf("Mode once the server answers: %v, want sharded", m)
	}
	r.unknown.Store(true)
	if m := p.Mode(ctx, r, "probe:{k}"); m != keysub.Sharded {
		t.Errorf("Mode after a kept Sharded: %v, want sharded, without asking", m)
	}
}

// TestProbe_refusalRechecked: an unknown command is kept as Classic (the
// server is not asked again at once), but only for Recheck: then Known
// says Unknown, the server is asked again, and a server that gained the
// command is used.
func TestProbe_refusalRechecked(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r := &renamer{c: redistest.Shared(t, redistest.Redis8).Client(t)}
	r.unknown.Store(true)
	p := keysub.Probe{Recheck: time.Hour}
	for range 2 {
		if m := p.Mode(ctx, r, "probe:{k}"); m != keysub.Classic {
			t.Fatalf("Mode answered %v to an unknown SPUBLISH, want classic", m)
		}
	}
	if n := r.calls.Load(); n != 1 {
		t.Fatalf("the refusal was not kept: %d SPUBLISHes, want 1", n)
	}
	r.unknown.Store(false)
	p.Recheck = time.Nanosecond // the refusal is now older than Recheck
	if m := p.Known(); m != keysub.Unknown {
		t.Errorf("Known after Recheck: %v, want unknown", m)
	}
	if m := p.Mode(ctx, r, "probe:{k}"); m != keysub.Sharded {
		t.Errorf("after Recheck, Mode answered %v: it did not ask again and find SPUBLISH", m)
	}
}

// TestReprobe: the steps of a caller that keeps meeting Unknown start at
// ReprobeMin, double, and stop growing at ReprobeMax.
func TestReprobe(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tries int
		want  time.Duration
	}{
		{name: "first", tries: 0, want: keysub.ReprobeMin},
		{name: "negative", tries: -3, want: keysub.ReprobeMin},
		{name: "second", tries: 1, want: 2 * keysub.ReprobeMin},
		{name: "fifth", tries: 4, want: 16 * keysub.ReprobeMin},
		{name: "capped", tries: 7, want: keysub.ReprobeMax},
		{name: "many", tries: 1 << 20, want: keysub.ReprobeMax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := keysub.Reprobe(tc.tries); got != tc.want {
				t.Errorf("Reprobe(%d) = %v, want %v", tc.tries, got, tc.want)
			}
		})
	}
}
