package keysub_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/keysub"
	"github.com/hotkv/stampede/internal/testkit/faultproxy"
	"github.com/hotkv/stampede/internal/testkit/redistest"
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

// classicSubs returns how many classic subscribers channel has, added up
// over the masters of a cluster.
func classicSubs(tb testing.TB, ctx context.Context, rc redis.UniversalClient, channel string) int64 {
	tb.Helper()
	cc, ok := rc.(*redis.ClusterClient)
	if !ok {
		n, err := rc.PubSubNumSub(ctx, channel).Result()
		if err != nil {
			tb.Fatalf("PUBSUB NUMSUB: %v", err)
		}
		return n[channel]
	}
	var total atomic.Int64
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		m, err := n.PubSubNumSub(ctx, channel).Result()
		total.Add(m[channel])
		return err
	}); err != nil {
		tb.Fatalf("PUBSUB NUMSUB: %v", err)
	}
	return total.Load()
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
		if _, at, _ := h.State(c); at.IsZero() {
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

// TestHub_confirmedBeforeWoken: a caller woken by ready finds the
// subscription's confirmation time (State) at or before its own clock
// reading. A waiter compares the two to know whether its subscription
// covered a read it sent next; a confirmation stamped after the wake-up
// made a waiter read its key once more for nothing, and that read could
// find a failed rebuild's key free before the failure's announcement
// came (the waiter then loaded itself instead of getting ErrRemoteLoad).
// The race is narrow: many subscriptions are checked, on a Hub each.
func TestHub_confirmedBeforeWoken(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	rc := s.Client(t)
	const rounds = 300
	for i := range rounds {
		h := keysub.New(keysub.Config{Client: rc})
		sub, ready, live := h.Add(ctx, "keysub:{woken}:ann", true)
		if !live {
			t.Fatal("not live")
		}
		redistest.Recv(t, ctx, ready, "the confirmation")
		woken := time.Now()
		_, at, _ := h.State(sub)
		h.Close()
		if at.IsZero() || at.After(woken) {
			t.Fatalf("round %d: confirmed at %v, %v after the caller it woke read the clock", i, at, at.Sub(woken))
		}
	}
}

// TestHub_syncIsABarrier: a message published before Sync is delivered
// when Sync returns true, although it travels on another connection than
// the publisher's reply; Sync on a Sub that is not confirmed is false.
func TestHub_syncIsABarrier(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		rc := s.Client(t)
		got := make(chan string, 1)
		h := keysub.New(keysub.Config{Client: rc, Deliver: func(_, payload string) { got <- payload }})
		defer h.Close()
		const ch = "keysub:{sync}:ann"
		sharded := s.Kind != redistest.Miniredis // it has no SSUBSCRIBE
		pub := "SPUBLISH"
		if !sharded {
			pub = "PUBLISH"
		}
		sub, ready, live := h.Add(ctx, ch, sharded)
		if !live {
			t.Fatal("not live")
		}
		redistest.Recv(t, ctx, ready, "the confirmation")
		for i := range 200 {
			want := strconv.Itoa(i)
			if err := rc.Do(ctx, pub, ch, want).Err(); err != nil {
				t.Fatal(err)
			}
			if !h.Sync(ctx, sub) {
				t.Fatalf("round %d: Sync on a confirmed subscription: false", i)
			}
			select {
			case m := <-got:
				if m != want {
					t.Fatalf("round %d: delivered %q", i, m)
				}
			default:
				t.Fatalf("round %d: Sync returned before the message published before it was delivered", i)
			}
		}
		h.Remove(sub)
		if h.Sync(ctx, sub) {
			t.Error("Sync on a removed Sub: true")
		}
	}, redistest.Redis8, redistest.Valkey, redistest.Cluster, redistest.Miniredis)
}

// proxied returns a client whose connections go through a new fault
// proxy in front of s, the proxy, and a channel told of each dial. A
// reply held back by the proxy waits for a minute.
func proxied(tb testing.TB, s *redistest.Server) (*redis.Client, *faultproxy.Proxy, <-chan struct{}) {
	tb.Helper()
	p, err := faultproxy.Start(s.Addrs()[0])
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Close() })
	dialing := make(chan struct{}, 8)
	rc := redis.NewClient(&redis.Options{
		Addr:        p.Addr(),
		ReadTimeout: time.Minute, // longer than the tests' ctx: the handshake waits for Resume
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			select {
			case dialing <- struct{}{}:
			default:
			}
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	})
	tb.Cleanup(func() { _ = rc.Close() }) // runs before the proxy closes
	return rc, p, dialing
}

// added is what an Add returned.
type added struct {
	sub   *keysub.Sub
	ready <-chan struct{}
}

// proxiedHub returns a Hub whose connections go through a fault proxy to
// s, with the proxy, a channel told of each dial of the Hub's connection,
// and the channel its messages are delivered to; the context bounds the
// test, so that an Add or Remove stuck behind a dial fails it. Resume the
// proxy before the test ends: closing the Hub waits for its loop.
func proxiedHub(t *testing.T, s *redistest.Server) (ctx context.Context, h *keysub.Hub, p *faultproxy.Proxy, dialing <-chan struct{}, got chan string) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	rc, p, dialing := proxied(t, s)
	got = make(chan string, 4)
	h = keysub.New(keysub.Config{Client: rc, Deliver: func(_, payload string) { got <- payload }})
	t.Cleanup(h.Close)
	return ctx, h, p, dialing, got
}

// TestHub_addWhileDialing: while the Hub's connection is dialled to a
// black-holed server (the handshake waits for the client's read timeout),
// Adds and Removes, of its channel and others, do not wait for the dial;
// once the server answers, the channels added meanwhile are subscribed,
// the one removed is not, and messages are delivered.
func TestHub_addWhileDialing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, h, p, dialing, got := proxiedHub(t, s)
		p.BlackHole()
		defer p.Resume() // before Close, which waits for the loop
		a, _, _ := h.Add(ctx, "keysub:a", false)
		redistest.Recv(t, ctx, dialing, "the dial")

		done := make(chan [2]added, 1)
		go func() {
			h.Remove(a) // the channel the dial subscribes
			c, _, _ := h.Add(ctx, "keysub:c", false)
			h.Remove(c)
			b, readyB, _ := h.Add(ctx, "keysub:b", false)
			d, readyD, _ := h.Add(ctx, "keysub:d", false)
			done <- [2]added{{b, readyB}, {d, readyD}}
		}()
		bd := redistest.Recv(t, ctx, done, "Adds and Removes while the connection is dialled")
		p.Resume()
		for _, x := range bd {
			redistest.Recv(t, ctx, x.ready, "the confirmation of a channel added while dialling")
		}
		pub := s.Client(t)
		redistest.WaitFor(t, ctx, "keysub:a to be unsubscribed", func() bool {
			n, err := pub.PubSubNumSub(ctx, "keysub:a").Result()
			return err == nil && n["keysub:a"] == 0
		})
		if err := pub.Publish(ctx, "keysub:b", "hello").Err(); err != nil {
			t.Fatal(err)
		}
		if m := redistest.Recv(t, ctx, got, "the message"); m != "hello" {
			t.Fatalf("got %q", m)
		}
		for _, x := range bd {
			h.Remove(x.sub)
		}
	}, redistest.Redis8)
}

// TestHub_addWhileRedialing: while go-redis redials a broken connection
// of the Hub to a black-holed server (in the loop's read, holding the
// connection's lock), Adds and Removes do not wait for the redial; once
// the server answers, the channel added meanwhile is subscribed.
func TestHub_addWhileRedialing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, h, p, dialing, got := proxiedHub(t, s)
		a, readyA, _ := h.Add(ctx, "keysub:a", false)
		redistest.Recv(t, ctx, dialing, "the dial")
		redistest.Recv(t, ctx, readyA, "the confirmation")
		p.BlackHole()
		defer p.Resume() // before Close, which waits for the loop
		if p.Reset() == 0 {
			t.Fatal("no connection to reset")
		}
		redistest.Recv(t, ctx, dialing, "the redial")

		done := make(chan added, 1)
		go func() {
			b, readyB, _ := h.Add(ctx, "keysub:b", false)
			h.Remove(a)
			done <- added{b, readyB}
		}()
		b := redistest.Recv(t, ctx, done, "an Add and a Remove while the connection is redialled")
		p.Resume()
		redistest.Recv(t, ctx, b.ready, "the confirmation of the channel added while redialling")
		if err := s.Client(t).Publish(ctx, "keysub:b", "hello").Err(); err != nil {
			t.Fatal(err)
		}
		if m := redistest.Recv(t, ctx, got, "the message"); m != "hello" {
			t.Fatalf("got %q", m)
		}
		h.Remove(b.sub)
	}, redistest.Redis8)
}

// TestHub_modesApart: a channel subscribed classic (SUBSCRIBE) and then
// wanted sharded (SSUBSCRIBE) gets a subscription of each kind, each
// confirmed on its own connection: the second Add does not join the
// first, whose mode a publisher that knows the server would not use. A
// message published with SPUBLISH reaches the sharded one, one published
// with PUBLISH the classic one; removing one leaves the other. (The
// second Add used to join the classic subscription, and every later one
// too while it lingered: a waiter wanting the sharded channel heard
// nothing.)
func TestHub_modesApart(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		rc := s.Client(t)
		got := make(chan string, 4)
		h := keysub.New(keysub.Config{Client: rc, Deliver: func(_, payload string) { got <- payload }})
		defer h.Close()
		const ch = "keysub:{modes}:ann"
		classic, readyC, liveC := h.Add(ctx, ch, false)
		sharded, readyS, liveS := h.Add(ctx, ch, true)
		if !liveC || !liveS {
			t.Fatalf("live %v, %v", liveC, liveS)
		}
		if classic == sharded {
			t.Fatal("a sharded Add joined the classic subscription of its channel")
		}
		redistest.Recv(t, ctx, readyC, "the classic confirmation")
		redistest.Recv(t, ctx, readyS, "the sharded confirmation")
		if n := shardSubs(t, ctx, rc, ch); n != 1 {
			t.Errorf("%d shard subscribers, want 1", n)
		}
		if n := classicSubs(t, ctx, rc, ch); n != 1 {
			t.Errorf("%d classic subscribers, want 1", n)
		}
		for _, pub := range []string{"SPUBLISH", "PUBLISH"} {
			if err := rc.Do(ctx, pub, ch, pub).Err(); err != nil {
				t.Fatal(err)
			}
			if m := redistest.Recv(t, ctx, got, "the message"); m != pub {
				t.Fatalf("got %q, want %q", m, pub)
			}
		}
		h.Remove(classic)
		redistest.WaitFor(t, ctx, "the classic channel to be unsubscribed", func() bool {
			return classicSubs(t, ctx, rc, ch) == 0
		})
		if n := shardSubs(t, ctx, rc, ch); n != 1 {
			t.Errorf("%d shard subscribers after the classic one was removed, want 1", n)
		}
		h.Remove(sharded)
	}, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestHub_lostWhenConnectionFails: the lost channel of a confirmed
// subscription closes when its connection fails; the subscription is
// confirmed again on a new connection, with a new lost channel, open.
func TestHub_lostWhenConnectionFails(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		rc := s.Client(t)
		h := keysub.New(keysub.Config{Client: rc})
		defer h.Close()
		sub, ready, live := h.Add(ctx, "keysub:{lost}:ann", true)
		if !live {
			t.Fatal("not live")
		}
		redistest.Recv(t, ctx, ready, "the confirmation")
		_, at, lost := h.State(sub)
		if at.IsZero() {
			t.Fatal("confirmed, but State says it is not")
		}
		if err := s.Client(t).Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
			t.Fatal(err)
		}
		redistest.Recv(t, ctx, lost, "lost to close with the connection")
		redistest.WaitFor(t, ctx, "the subscription to be confirmed again", func() bool {
			_, at, _ := h.State(sub)
			return !at.IsZero()
		})
		_, _, again := h.State(sub)
		select {
		case <-again:
			t.Error("the new confirmation's lost channel is closed")
		default:
		}
		h.Remove(sub)
	}, redistest.Redis8, redistest.Valkey)
}
