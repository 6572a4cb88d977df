package cache_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/testkit/faultproxy"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
	"github.com/vmihailenco/msgpack/v5"
)

// The tests of per-key announcements (issue 13): a write is delivered to
// the processes waiting for its key, not to every process of the
// namespace, and on a Cluster it stays on the key's shard.

// signalAnnounced returns a channel that receives once per announcement
// about key that r's client published, on the key's channel (SPUBLISH or
// PUBLISH) or, with Options.Broadcast, on the namespace's.
func signalAnnounced(r *recorder, ns, key string) <-chan struct{} {
	ch := make(chan struct{}, 64)
	own, whole := valueKey(ns, key)+":ann", ns+":announce"
	r.onAfter(func(args []string, _ error) {
		if len(args) > 1 && (args[0] == "spublish" || args[0] == "publish") && (args[1] == own || args[1] == whole) {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	})
	return ch
}

// isAnnouncement reports whether the command args (as the recorder has
// them) publishes an announcement of namespace ns: on a key's channel or,
// with Options.Broadcast, on the namespace's.
func isAnnouncement(args []string, ns string) bool {
	if len(args) < 2 || args[0] != "spublish" && args[0] != "publish" {
		return false
	}
	return args[1] == ns+":announce" || strings.HasPrefix(args[1], ns+":{") && strings.HasSuffix(args[1], ":ann")
}

// mustNotLoad is the loader of a waiter: it fails the call if it runs.
func mustNotLoad(context.Context) (string, error) { return "", errors.New("the waiter must not load") }

// receivers is a client hook that adds up the replies of the client's
// (S)PUBLISHes of announcements: how many subscribers each reached.
type receivers struct {
	mu        sync.Mutex
	published int   // announcements published
	scripted  int   // of those, published by a write's own script
	reached   int64 // subscribers they reached, in all
}

func countReceivers(rc redis.UniversalClient) *receivers {
	r := &receivers{}
	rc.AddHook(r)
	return r
}

func (r *receivers) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *receivers) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		r.add(cmd)
		return err
	}
}

func (r *receivers) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			r.add(cmd)
		}
		return err
	}
}

func (r *receivers) add(cmd redis.Cmder) {
	name := strings.ToLower(cmd.Name())
	args := cmd.Args()
	if name == "evalsha" || name == "eval" {
		r.addScript(cmd, args)
		return
	}
	if name != "publish" && name != "spublish" || len(args) < 3 {
		return
	}
	if msg, _ := args[2].(string); len(msg) < 2 {
		return // the probe's empty message
	}
	var n int64
	switch c := cmd.(type) {
	case *redis.IntCmd:
		n = c.Val()
	case *redis.Cmd:
		n, _ = c.Int64()
	}
	r.mu.Lock()
	r.published++
	r.reached += n
	r.mu.Unlock()
}

// addScript counts the announcement that the write of a claimed key's
// value published in its own script (redisx.SetIfEqualPublish: its last
// three arguments are the channel, the message and the publishing
// command; it returns {1, subscribers reached} when it wrote and
// published).
func (r *receivers) addScript(cmd redis.Cmder, args []any) {
	if len(args) < 3 {
		return
	}
	if pub, _ := args[len(args)-1].(string); pub != "publish" && pub != "spublish" {
		return
	}
	c, ok := cmd.(*redis.Cmd)
	if !ok {
		return
	}
	res, err := c.Slice()
	if err != nil || len(res) != 2 {
		return
	}
	n, ok := res[1].(int64)
	if !ok {
		return
	}
	r.mu.Lock()
	r.published++
	r.scripted++
	r.reached += n
	r.mu.Unlock()
}

// inScripts returns how many of the announcements published since the
// last take were published by a write's own script.
func (r *receivers) inScripts() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.scripted
}

// take returns the counts so far and starts again from zero.
func (r *receivers) take() (published int, reached int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	published, reached = r.published, r.reached
	r.published, r.reached, r.scripted = 0, 0, 0
	return published, reached
}

// onMasters runs fn on every master of s (the one server if it is not a
// cluster).
func onMasters(tb testing.TB, ctx context.Context, rc redis.UniversalClient, fn func(n redis.UniversalClient)) {
	tb.Helper()
	cc, ok := rc.(*redis.ClusterClient)
	if !ok {
		fn(rc)
		return
	}
	var mu sync.Mutex
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		fn(n)
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
}

// numsub returns how many subscribers channel has on the servers of rc:
// classic ones (PUBSUB NUMSUB) and shard ones (PUBSUB SHARDNUMSUB), added
// up over the masters of a cluster.
func numsub(tb testing.TB, ctx context.Context, rc redis.UniversalClient, channel string) (classic, shard int64) {
	tb.Helper()
	onMasters(tb, ctx, rc, func(n redis.UniversalClient) {
		for _, sub := range []string{"NUMSUB", "SHARDNUMSUB"} {
			r, err := n.Do(ctx, "PUBSUB", sub, channel).Slice()
			if err != nil || len(r) != 2 {
				tb.Fatalf("PUBSUB %s %s: %v, %v", sub, channel, r, err)
			}
			c, _ := r[1].(int64)
			if sub == "NUMSUB" {
				classic += c
			} else {
				shard += c
			}
		}
	})
	return classic, shard
}

// TestAnnounce_idleCacheHearsNothing: a Cache that waits for no key
// receives no message for another Cache's Set, Delete or rebuild, and
// those writes reach no subscriber at all (one (S)PUBLISH to nobody);
// a Cache waiting for the key is reached by exactly the rebuild's notice.
// With Options.Broadcast (the design before issue 13), every Cache hears
// every write: the same assertions fail, which the broadcast case checks.
func TestAnnounce_idleCacheHearsNothing(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, broadcast := range []bool{false, true} {
			name := "per-key"
			if broadcast {
				name = "broadcast"
			}
			t.Run(name, func(t *testing.T) {
				ctx := testCtx(t)
				ns := namespace(t)
				opts := &cache.Options{Namespace: ns, Broadcast: broadcast, WaitTimeout: time.Minute, PollInterval: time.Minute}
				rcA := s.Client(t)
				pubs := countReceivers(rcA)
				a := newCacheOn(t, rcA, opts)
				idle := []*cache.Cache{newCacheOn(t, s.Client(t), opts), newCacheOn(t, s.Client(t), opts)}
				if broadcast {
					redistest.WaitFor(t, ctx, "every Cache subscribed to the namespace channel", func() bool {
						n, _ := numsub(t, ctx, rcA, ns+":announce")
						return n == 3
					})
				}

				// Writes nobody waits for.
				if err := cache.Set(ctx, a, "k1", "v"); err != nil {
					t.Fatal(err)
				}
				if err := a.Delete(ctx, "k1"); err != nil {
					t.Fatal(err)
				}
				if _, err := cache.GetOrLoad(ctx, a, "k2", func(context.Context) (string, error) { return "v", nil }); err != nil {
					t.Fatal(err)
				}
				writes, reached := pubs.take()
				if writes != 3 {
					t.Fatalf("%d announcements published, want 3", writes)
				}
				var heard uint64
				for i, c := range idle {
					if broadcast {
						// Delivered before the next PING's reply; wait for them.
						redistest.WaitFor(t, ctx, "the idle Caches to hear the writes", func() bool {
							d, _, _ := cache.AnnounceCounts(c)
							return d >= 3
						})
					}
					d, _, _ := cache.AnnounceCounts(c)
					t.Logf("idle Cache %d received %d messages for %d writes", i, d, writes)
					heard += d
				}
				t.Logf("%s: %d writes nobody waits for reached %d subscribers (%.2f per write)", name, writes, reached, float64(reached)/float64(writes))
				if !broadcast && (reached != 0 || heard != 0) {
					t.Errorf("writes nobody waits for reached %d subscribers, idle Caches received %d messages: want 0", reached, heard)
				}
				// A classic PUBLISH on a Cluster counts only the subscribers
				// of the node it was sent to, though it reaches every node.
				if broadcast && (reached < 3*int64(writes) && s.Kind != redistest.Cluster || heard < 2*uint64(writes)) {
					t.Errorf("broadcast: %d subscribers reached, %d messages received by the idle Caches: want every Cache to hear every write", reached, heard)
				}

				// A rebuild that one idle Cache waits for.
				started, release := make(chan struct{}), make(chan struct{})
				resA, resB := make(chan error, 1), make(chan error, 1)
				go func() {
					_, err := cache.GetOrLoad(ctx, a, "k3", heldLoader(started, release, "v3"))
					resA <- err
				}()
				redistest.Recv(t, ctx, started, "a's load to start")
				b := idle[0]
				go func() {
					v, err := cache.GetOrLoad(ctx, b, "k3", mustNotLoad)
					if err == nil && v != "v3" {
						err = errors.New("waiter got " + v)
					}
					resB <- err
				}()
				if !broadcast {
					redistest.WaitFor(t, ctx, "b to subscribe to the key's channel", func() bool {
						_, n := numsub(t, ctx, rcA, valueKey(ns, "k3")+":ann")
						return n == 1
					})
				} else {
					redistest.WaitFor(t, ctx, "b to wait", func() bool { return b.Stats().Waits > 0 })
				}
				close(release)
				for _, ch := range []chan error{resA, resB} {
					if err := redistest.Recv(t, ctx, ch, "the loader and the waiter"); err != nil {
						t.Fatal(err)
					}
				}
				writes, reached = pubs.take()
				t.Logf("%s: a rebuild one Cache waits for reached %d subscribers", name, reached)
				if !broadcast && (writes != 1 || reached != 1) {
					t.Errorf("the rebuild's announcements: %d, reaching %d subscribers; want 1 reaching the waiter", writes, reached)
				}
				if d, _, _ := cache.AnnounceCounts(idle[1]); !broadcast && d != 0 {
					t.Errorf("the other idle Cache received %d messages, want 0", d)
				}
			})
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestAnnounce_clusterShardOnly: on the 3-master Cluster, a waiter's
// subscription exists only on the master that owns the key's slot, the
// announcements of a rebuild, a Set and a Delete of the key are published
// with SPUBLISH (the waiter, and only it, is reached; it is woken by the
// announcement, the poll being a minute), and no node sees a classic
// message: a pattern subscriber to the namespace on every node receives
// none (a classic PUBLISH is forwarded to every node, SPUBLISH never
// reaches pattern subscribers).
func TestAnnounce_clusterShardOnly(t *testing.T) {
	s := redistest.Shared(t, redistest.Cluster)
	ctx := testCtx(t)
	ns := namespace(t)
	opts := &cache.Options{Namespace: ns, WaitTimeout: time.Minute, PollInterval: time.Minute}
	rcA := s.Client(t)
	pubs := countReceivers(rcA)
	a := newCacheOn(t, rcA, opts)
	b := newCacheOn(t, s.Client(t), opts)
	channel := valueKey(ns, "k") + ":ann"

	// A pattern subscriber on every node.
	var watchers []*redis.PubSub
	for _, addr := range s.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { _ = n.Close() })
		ps := n.PSubscribe(ctx, ns+":*")
		t.Cleanup(func() { _ = ps.Close() })
		if _, err := ps.Receive(ctx); err != nil { // the confirmation
			t.Fatal(err)
		}
		watchers = append(watchers, ps)
	}

	started, release := make(chan struct{}), make(chan struct{})
	resA, resB := make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := cache.GetOrLoad(ctx, a, "k", heldLoader(started, release, "v"))
		resA <- err
	}()
	redistest.Recv(t, ctx, started, "a's load to start")
	go func() {
		v, err := cache.GetOrLoad(ctx, b, "k", mustNotLoad)
		if err == nil && v != "v" {
			err = errors.New("waiter got " + v)
		}
		resB <- err
	}()
	redistest.WaitFor(t, ctx, "b to subscribe", func() bool { _, n := numsub(t, ctx, rcA, channel); return n == 1 })
	owner, err := rcA.(*redis.ClusterClient).MasterForKey(ctx, channel)
	if err != nil {
		t.Fatal(err)
	}
	for _, addr := range s.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: addr})
		r, err := n.Do(ctx, "PUBSUB", "SHARDNUMSUB", channel).Slice()
		n.Close()
		if err != nil || len(r) != 2 {
			t.Fatalf("%s: PUBSUB SHARDNUMSUB: %v, %v", addr, r, err)
		}
		want := int64(0)
		if addr == owner.Options().Addr {
			want = 1
		}
		if got, _ := r[1].(int64); got != want {
			t.Errorf("%s (owner %s): %d shard subscribers of %s, want %d", addr, owner.Options().Addr, got, channel, want)
		}
	}
	close(release)
	for _, ch := range []chan error{resA, resB} {
		if err := redistest.Recv(t, ctx, ch, "the loader and the waiter"); err != nil {
			t.Fatal(err)
		}
	}
	if err := cache.Set(ctx, a, "k", "v2"); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if writes, reached := pubs.take(); writes != 3 || reached != 3 {
		// b's subscription lingers after its wait: it hears the Set and the
		// Delete too.
		t.Errorf("%d announcements reaching %d subscribers, want 3 reaching b each", writes, reached)
	}
	redistest.WaitFor(t, ctx, "b to receive the three messages", func() bool { d, _, _ := cache.AnnounceCounts(b); return d >= 3 })

	// A marker published from every node, after the writes: each watcher
	// must receive the three markers and nothing before them.
	for _, addr := range s.Addrs() {
		n := redis.NewClient(&redis.Options{Addr: addr})
		err := n.Publish(ctx, ns+":marker", addr).Err()
		n.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, ps := range watchers {
		for range s.Addrs() {
			m, err := ps.ReceiveMessage(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if m.Channel != ns+":marker" {
				t.Errorf("node %s received %q on %s: a message left the key's shard", s.Addrs()[i], m.Payload, m.Channel)
			}
		}
	}
}

// publishOn publishes msg on channel (SPUBLISH when sharded).
func publishOn(ctx context.Context, rc redis.UniversalClient, channel, msg string, sharded bool) error {
	if sharded {
		return rc.SPublish(ctx, channel, msg).Err()
	}
	return rc.Publish(ctx, channel, msg).Err()
}

// TestAnnounce_missWriteInOneStep: a miss's write publishes its
// announcement in its own script, and only when it wrote. A subscriber on
// the key's channel receives the value with the message, and the writer's
// client sends no (S)PUBLISH of its own; when a Set took the key while the
// loader ran, the script writes and publishes nothing, and the only notice
// of the rebuild, published after its write's reply, sends the waiters to
// read the key again (the Set's value): no message carries the load's
// value.
func TestAnnounce_missWriteInOneStep(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		opts := &cache.Options{Namespace: ns, WaitTimeout: time.Minute}
		rcA := s.Client(t)
		pubs := countReceivers(rcA)
		a := newCacheOn(t, rcA, opts)
		b := newCacheOn(t, s.Client(t), opts)
		admin := s.Client(t)
		for _, tc := range []struct {
			name   string
			setter bool // a Set of b takes the key while a's loader runs
		}{
			{name: "claim held"},
			{name: "claim taken by a Set", setter: true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				key := randomString(t, 8)
				channel := valueKey(ns, key) + ":ann"
				sharded := s.Kind != redistest.Miniredis
				next := redistest.Subscribe(t, ctx, s.Client(t), channel, sharded)
				started, release := make(chan struct{}), make(chan struct{})
				rebuild := goGetOrLoad(ctx, a, key, heldLoader(started, release, "the load's value"))
				redistest.Recv(t, ctx, started, "a's load to start")
				if tc.setter {
					if err := cache.Set(ctx, b, key, "the Set's value"); err != nil {
						t.Fatal(err)
					}
				}
				pubs.take()
				close(release)
				if r := redistest.Recv(t, ctx, rebuild, "a's rebuild"); r.err != nil || r.v != "the load's value" {
					t.Fatalf("a: %q, %v; want its load's value", r.v, r.err)
				}
				scripted := pubs.inScripts()
				published, _ := pubs.take()
				if err := publishOn(ctx, admin, channel, "marker", sharded); err != nil {
					t.Fatal(err)
				}
				var rebuilds []string
				for msg := next(); msg != "marker"; msg = next() {
					if strings.Contains(msg, "the load's value") && tc.setter {
						t.Errorf("a message carries the load's value, which was never stored: %q", msg)
					}
					if parts := strings.SplitN(msg, "\x00", 3); len(parts) > 1 && parts[1] != "" { // a rebuild's, with its claim's token
						rebuilds = append(rebuilds, msg)
					}
				}
				want := "the load's value"
				if tc.setter {
					want = "the Set's value"
				}
				if v, err := cache.Get[string](ctx, b, key); err != nil || v != want {
					t.Errorf("the key holds %q, %v; want %q", v, err, want)
				}
				if len(rebuilds) != 1 {
					t.Fatalf("the rebuild's messages: %q, want one", rebuilds)
				}
				parts := strings.SplitN(rebuilds[0], "\x00", 3)
				switch {
				case !tc.setter && (len(parts) != 3 || !strings.Contains(parts[2], "the load's value") || published != 1 || scripted != 1):
					t.Errorf("the rebuild's message %q, %d publishes (%d by the write's script); want one, by the script, with the value", rebuilds[0], published, scripted)
				case tc.setter && len(parts) != 2:
					t.Errorf("the rebuild's message %q; want a notice to read the key again, without a value", rebuilds[0])
				}
			})
		}
	})
}

// TestAnnounce_writeBeforeSubscribe: a write made after a waiter read the
// key's claim but before its subscription was confirmed is announced to
// nobody (the test checks that the announcement reached no subscriber),
// yet the waiter learns of it at once, not by its poll (an hour here).
// GetOrLoadMany subscribes after its read found the claim: it reads the
// key again once the server confirms the subscription. GetOrLoad, whose
// first read found the claim, subscribes before it reads the key again to
// wait, so that read finds the value. miniredis has no sharded pub/sub:
// there the key's channel is a classic one (PUBLISH, SUBSCRIBE).
func TestAnnounce_writeBeforeSubscribe(t *testing.T) {
	for _, tc := range []struct {
		name    string
		get     func(ctx context.Context, c *cache.Cache) (string, error)
		recheck bool // the waiter reads the key again after its subscription is confirmed
	}{
		{name: "GetOrLoadMany", recheck: true, get: func(ctx context.Context, c *cache.Cache) (string, error) {
			m, err := cache.GetOrLoadMany(ctx, c, []string{"k"}, func(context.Context, []string) (map[string]string, error) {
				return nil, errors.New("the waiter must not load")
			})
			return m["k"], err
		}},
		{name: "GetOrLoad", get: func(ctx context.Context, c *cache.Cache) (string, error) {
			return cache.GetOrLoad(ctx, c, "k", mustNotLoad)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
				ctx := testCtx(t)
				ns := namespace(t)
				opts := &cache.Options{Namespace: ns, WaitTimeout: time.Hour, PollInterval: time.Hour}
				rcA := s.Client(t)
				pubs := countReceivers(rcA)
				a := newCacheOn(t, rcA, opts)
				b := newCacheOn(t, s.Client(t), opts)

				started, release := make(chan struct{}), make(chan struct{})
				resA, resB := make(chan error, 1), make(chan error, 1)
				go func() {
					_, err := cache.GetOrLoad(ctx, a, "k", heldLoader(started, release, "v"))
					resA <- err
				}()
				redistest.Recv(t, ctx, started, "a's load to start")
				var once atomic.Bool
				cache.BeforeSubscribe(b, func(string) {
					if once.CompareAndSwap(false, true) {
						// b has read a's claim: a writes and announces now.
						close(release)
						resA <- redistest.Recv(t, ctx, resA, "a's rebuild")
					}
				})
				go func() {
					v, err := tc.get(ctx, b)
					if err == nil && v != "v" {
						err = errors.New("waiter got " + v)
					}
					resB <- err
				}()
				if err := redistest.Recv(t, ctx, resB, "the waiter"); err != nil {
					t.Fatal(err)
				}
				if err := <-resA; err != nil {
					t.Fatal(err)
				}
				if !once.Load() {
					t.Fatal("b never subscribed")
				}
				if writes, reached := pubs.take(); writes != 1 || reached != 0 {
					t.Errorf("the rebuild's announcements: %d reaching %d subscribers, want 1 reaching nobody", writes, reached)
				}
				if _, _, rechecks := cache.AnnounceCounts(b); (rechecks > 0) != tc.recheck {
					t.Errorf("b read the key again after subscribing %d times, want that to be %v", rechecks, tc.recheck)
				}
				if st := b.Stats(); st.Loads != 0 {
					t.Errorf("b: stats %+v, want no load", st)
				}
			}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster, redistest.Miniredis) // miniredis: no sharded pub/sub, PUBLISH per key
		})
	}
}

// shardSplitClient sends SSUBSCRIBE over a client of its own (through a
// fault proxy) and everything else over the embedded client, so that a
// fault can cut a waiter's per-key subscription alone.
type shardSplitClient struct {
	redis.UniversalClient
	sub redis.UniversalClient
}

func (c *shardSplitClient) SSubscribe(ctx context.Context, channels ...string) *redis.PubSub {
	return c.sub.SSubscribe(ctx, channels...)
}

// TestAnnounce_faults: the connection of a waiter's per-key subscription
// is black-holed, or reset with reconnects refused, while it waits; the
// rebuild's announcement is lost (the waiter receives no message), and the
// poll still wakes it long before WaitTimeout, without loading. On the
// Cluster the subscription is the one on the key's master.
func TestAnnounce_faults(t *testing.T) {
	const (
		wait = 30 * time.Second
		poll = 100 * time.Millisecond
	)
	tests := []struct {
		name   string
		fault  func(p faultproxy.Faults)
		closes bool // the fault ends the subscription on the server
	}{
		{name: "black-holed", fault: func(p faultproxy.Faults) { p.BlackHole() }},
		{name: "reset", fault: func(p faultproxy.Faults) { p.Refuse(); p.Reset() }, closes: true},
	}
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				ctx := testCtx(t)
				ns := namespace(t)
				proxied, p := faultyClient(t, s, faultTimeouts)
				direct := s.Client(t)
				pubs := countReceivers(direct)
				w := newCacheOn(t, &shardSplitClient{UniversalClient: s.Client(t), sub: proxied},
					&cache.Options{Namespace: ns, WaitTimeout: wait, PollInterval: poll})
				r := newCacheOn(t, direct, &cache.Options{Namespace: ns})
				channel := valueKey(ns, "k") + ":ann"

				started := make(chan struct{})
				release, open := gate(t)
				rebuilder := goGetOrLoad(ctx, r, "k", func(context.Context) (string, error) {
					close(started)
					<-release
					return "rebuilt", nil
				})
				redistest.Recv(t, ctx, started, "the rebuilder to claim the key")
				var calls atomic.Int32
				waiter := goGetOrLoad(ctx, w, "k", neverLoad[string](&calls))
				redistest.WaitFor(t, ctx, "the waiter to wait, subscribed", func() bool {
					_, n := numsub(t, ctx, direct, channel)
					return w.Stats().Waits == 1 && n == 1
				})
				tt.fault(p)
				if tt.closes {
					redistest.WaitFor(t, ctx, "the server to drop the subscription", func() bool {
						_, n := numsub(t, ctx, direct, channel)
						return n == 0
					})
				}
				opened := time.Now()
				open()
				if res := redistest.Recv(t, ctx, waiter, "the waiter"); res.err != nil || res.v != "rebuilt" {
					t.Errorf("waiter: %q, %v; want the rebuilt value", res.v, res.err)
				}
				woke := time.Since(opened)
				if res := redistest.Recv(t, ctx, rebuilder, "the rebuilder"); res.err != nil || res.v != "rebuilt" {
					t.Errorf("rebuilder: %q, %v", res.v, res.err)
				}
				writes, reached := pubs.take()
				if d, _, _ := cache.AnnounceCounts(w); d != 0 {
					t.Errorf("the waiter received %d messages: the announcement was not lost, the test proves nothing", d)
				}
				if st := w.Stats(); st.Loads != 0 || st.WaitTimeouts != 0 || calls.Load() != 0 || woke > wait/6 {
					t.Errorf("waiter woke after %v with stats %+v; want it woken by a poll (every %v), long before WaitTimeout %v, without loading", woke, st, poll, wait)
				}
				t.Logf("%d announcements reaching %d subscribers; the waiter woke by its poll after %v", writes, reached, woke)
				p.Resume()
			})
		}
	}, redistest.Redis8, redistest.Cluster)
}

// TestDelete_wakesWaitersElsewhere (issue 10, #16): a Delete tells the
// other processes, so that a flight there waiting for a rebuild that the
// Delete overtook reads the key again at once instead of waiting for that
// rebuild's announcement (or a poll): a caller that starts after the
// Delete gets a load made after it without that wait.
func TestDelete_wakesWaitersElsewhere(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		ns := namespace(t)
		// Polls are off the table, and A's announcement never comes in
		// time: only the Delete's notice can end B's wait.
		opts := cache.Options{Namespace: ns, WaitTimeout: time.Minute, PollInterval: time.Minute}
		rcA := s.Client(t)
		recA := record(rcA)
		a := newCacheOn(t, rcA, &opts)
		// A's value stored and its announcement held back: the two-step
		// write (where the write's script cannot publish) has that window.
		cache.TwoStepWrites(a)
		b := newCacheOn(t, s.Client(t), &opts)
		d := newCacheOn(t, s.Client(t), &opts)
		publishing := make(chan struct{}, 1)
		announce, letAnnounce := gate(t)
		recA.onBefore(func(args []string) {
			if isAnnouncement(args, ns) {
				publishing <- struct{}{}
				<-announce
			}
		})

		started := make(chan struct{})
		release, open := gate(t)
		a1 := goGetOrLoad(ctx, a, "k", heldLoader(started, release, "before the Delete"))
		redistest.Recv(t, ctx, started, "A's load to start")
		b1 := goGetOrLoad(ctx, b, "k", func(context.Context) (string, error) { return "B's load", nil })
		redistest.WaitFor(t, ctx, "B to wait for A's claim", func() bool { return b.Stats().Waits == 1 })
		open()
		redistest.Recv(t, ctx, publishing, "A to write and announce")

		if err := d.Delete(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		b2 := goGetOrLoad(ctx, b, "k", func(context.Context) (string, error) { return "B's load", nil })
		// A hang here (until the announcement or a poll) is the failure.
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		for name, ch := range map[string]<-chan result[string]{"B's caller before the Delete": b1, "B's caller after the Delete": b2} {
			if r := redistest.Recv(t, wctx, ch, name); r.err != nil || r.v != "B's load" {
				t.Errorf("%s got %q, %v; want B's load, made after the Delete", name, r.v, r.err)
			}
		}
		letAnnounce()
		if r := redistest.Recv(t, ctx, a1, "A's caller"); r.err != nil || r.v != "before the Delete" {
			t.Errorf("A's caller got %q, %v", r.v, r.err)
		}
	}, redistest.Redis8, redistest.Redis7)
}

// A waiter takes a value from an announcement only if it comes from the
// rebuild whose claim the waiter saw: an announcement of an older rebuild
// (say, one published after a Delete) only makes it read the key again.
func TestGetOrLoad_announcementOfAnotherClaimIsNotTaken(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	ns := namespace(t)
	c, rc := newCache(t, s, &cache.Options{Namespace: ns, WaitTimeout: time.Minute, PollInterval: 20 * time.Millisecond, Broadcast: true}) // the test publishes on NS:announce
	locks, err := lock.New(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	stored := valueKey(ns, "k")
	claim, err := locks.Obtain(ctx, stored, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	got := goGetOrLoad(ctx, c, "k", neverLoad[string](&calls))
	redistest.WaitFor(t, ctx, "the waiter to wait", func() bool { return c.Stats().Waits == 1 })

	payload, err := msgpack.Marshal("from an older rebuild")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	old := codec.Append(nil, codec.Entry{Written: now, FreshUntil: now.Add(time.Hour), Payload: payload})
	foreign := strings.Repeat("0", 32)
	if err := rc.Publish(ctx, ns+":announce", "v"+stored+"\x00"+foreign+"\x00"+string(old)).Err(); err != nil {
		t.Fatal(err)
	}
	// Then the claim's own rebuild reports a failure, repeatedly, since a
	// message sent while the waiter re-reads the key would be missed.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case r := <-got:
			if !errors.Is(r.err, cache.ErrRemoteLoad) || !strings.Contains(r.err.Error(), "the claim's own") {
				t.Fatalf("waiter got %q, %v; want the claim's ErrRemoteLoad, not the older rebuild's value", r.v, r.err)
			}
			if calls.Load() != 0 {
				t.Fatalf("the waiter loaded %d times", calls.Load())
			}
			return
		case <-tick.C:
			msg := "e" + stored + "\x00" + claim.Token() + "\x00the claim's own failure"
			if err := rc.Publish(ctx, ns+":announce", msg).Err(); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("the waiter never returned")
		}
	}
}
