package keysub_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/keysub"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// TestProbe_transientNotKept: a BUSY answer to the probe's SPUBLISH says
// nothing about what the server has: that call answers "no", and the next
// one, once the server answers again, finds sharded pub/sub. (It used to
// keep "no" for the process's life: a lock client then announced
// hand-offs with PUBLISH while the others listened with SSUBSCRIBE.)
func TestProbe_transientNotKept(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		s = redistest.Start(t, s.Kind) // made busy: not shared
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		rc := s.Client(t)
		var p keysub.Probe
		stop := redistest.Busy(t, s.Addrs()[0])
		if p.Sharded(ctx, rc, "probe:{k}") {
			t.Fatal("Sharded answered yes while the server answered BUSY")
		}
		stop()
		if !p.Sharded(ctx, rc, "probe:{k}") {
			t.Error("after one BUSY, Sharded still answers no: the passing reply was kept")
		}
	}, redistest.Redis8, redistest.Valkey)
}

// renamer sends its commands through a real client, under another name
// while unknown is set, so that the server answers "unknown command" as
// a server without the command does; it counts the commands.
type renamer struct {
	c       redis.UniversalClient
	unknown atomic.Bool
	calls   atomic.Int64
}

func (r *renamer) Do(ctx context.Context, args ...any) *redis.Cmd {
	r.calls.Add(1)
	if r.unknown.Load() {
		args = append([]any{"X" + args[0].(string)}, args[1:]...)
	}
	return r.c.Do(ctx, args...)
}

// TestProbe_refusalRechecked: an unknown command is kept as "no" (the
// server is not asked again at once), but only for Recheck: then it is
// asked again, and a server that gained the command is used.
func TestProbe_refusalRechecked(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r := &renamer{c: redistest.Shared(t, redistest.Redis8).Client(t)}
	r.unknown.Store(true)
	p := keysub.Probe{Recheck: time.Hour}
	for range 2 {
		if p.Sharded(ctx, r, "probe:{k}") {
			t.Fatal("Sharded answered yes to an unknown SPUBLISH")
		}
	}
	if n := r.calls.Load(); n != 1 {
		t.Fatalf("the refusal was not kept: %d SPUBLISHes, want 1", n)
	}
	r.unknown.Store(false)
	p.Recheck = time.Nanosecond // the refusal is now older than Recheck
	if !p.Sharded(ctx, r, "probe:{k}") {
		t.Error("after Recheck, Sharded did not ask again and find SPUBLISH")
	}
}
