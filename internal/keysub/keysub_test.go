package keysub_test

import (
	"context"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/keysub"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// shardSubs returns how many shard subscribers channel has on its server.
func shardSubs(tb testing.TB, ctx context.Context, rc redis.UniversalClient, channel string) int64 {
	tb.Helper()
	if cc, ok := rc.(*redis.ClusterClient); ok {
		n, err := cc.MasterForKey(ctx, channel)
		if err != nil {
			tb.Fatal(err)
		}
		rc = n
	}
	r, err := rc.Do(ctx, "PUBSUB", "SHARDNUMSUB", channel).Slice()
	if err != nil || len(r) != 2 {
		tb.Fatalf("PUBSUB SHARDNUMSUB: %v, %v", r, err)
	}
	n, _ := r[1].(int64)
	return n
}

// TestHub_shareLingerDeliver: two Adds of a channel share one
// subscription, confirmed once; a message published after the
// confirmation is delivered once; after the last Remove the channel stays
// subscribed (Linger) and a new Add finds it confirmed at once; Close ends
// it.
func TestHub_shareLingerDeliver(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		rc := s.Client(t)
		got := make(chan string, 4)
		h := keysub.New(keysub.Config{
			Client:  rc,
			Deliver: func(_, payload string) { got <- payload },
			Linger:  time.Hour,
		})
		defer h.Close()
		const ch = "keysub:{k}:ann"
		a, ready, live := h.Add(ctx, ch, true)
		b, ready2, _ := h.Add(ctx, ch, true)
		if !live || a != b || ready != ready2 {
			t.Fatalf("two Adds: live %v, shared %v", live, a == b)
		}
		redistest.Recv(t, ctx, ready, "the confirmation")
		if err := rc.Do(ctx, "SPUBLISH", ch, "hello").Err(); err != nil {
			t.Fatal(err)
		}
		if m := redistest.Recv(t, ctx, got, "the message"); m != "hello" {
			t.Fatalf("got %q", m)
		}
		h.Remove(a)
		h.Remove(b)
		if n := shardSubs(t, ctx, rc, ch); n != 1 {
			t.Fatalf("%d subscribers after the last Remove, want 1 (lingering)", n)
		}
		c, ready3, _ := h.Add(ctx, ch, true)
		select {
		case <-ready3:
		default:
			t.Fatal("a lingering subscription is not ready at once")
		}
		if _, at := h.State(c); at.IsZero() {
			t.Fatal("State: no confirmation time")
		}
		h.Remove(c)
		h.Close()
		redistest.WaitFor(t, ctx, "Close to unsubscribe", func() bool { return shardSubs(t, ctx, rc, ch) == 0 })
		if d, _ := h.Counts(); d != 1 {
			t.Errorf("%d messages delivered, want 1", d)
		}
	}, redistest.Redis8, redistest.Cluster)
}
