package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/faultproxy"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// startSet starts a Set in front of n echo servers, closed in cleanup.
func startSet(tb testing.TB, n int) (*faultproxy.Set, []string) {
	tb.Helper()
	targets := make([]string, n)
	for i := range targets {
		targets[i] = echo(tb)
	}
	s, err := faultproxy.StartSet(targets...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return s, targets
}

// dialSet dials target through s's Dialer.
func dialSet(tb testing.TB, s *faultproxy.Set, target string) (net.Conn, *bufio.Reader) {
	tb.Helper()
	c, err := s.Dialer()(tb.Context(), "tcp", target)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func TestSet_dialerMapsTargetsToTheirProxies(t *testing.T) {
	s, targets := startSet(t, 3)
	if got := s.Targets(); len(got) != 3 || got[0] != targets[0] || got[2] != targets[2] {
		t.Fatalf("Targets() = %v, want %v", got, targets)
	}
	for i, target := range targets {
		c, r := dialSet(t, s, target)
		if got, err := roundTrip(c, r, "x"); err != nil || got != "x" {
			t.Fatalf("round trip to %s: %q, %v", target, got, err)
		}
		// The connection went through the target's proxy and no other.
		for j, other := range targets {
			want := 0
			if j <= i {
				want = 1
			}
			if st := s.For(other).Stats(); st.Accepted != want {
				t.Fatalf("after dialling %d targets, the proxy for target %d accepted %d connections, want %d", i+1, j, st.Accepted, want)
			}
		}
		if p := s.For(target); p.Target() != target || c.RemoteAddr().String() != p.Addr() {
			t.Fatalf("connection to %s reached %s, want its proxy %s (target %s)", target, c.RemoteAddr(), p.Addr(), p.Target())
		}
	}
}

func TestSet_dialerRefusesUnknownAddresses(t *testing.T) {
	s, targets := startSet(t, 2)
	// A live address the Set has no proxy for: dialling it directly
	// would bypass the faults.
	other := echo(t)
	for _, tt := range []struct{ name, network, addr, want string }{
		{"unknown address", "tcp", other, other},
		{"unknown network", "unix", targets[0], "unix"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := s.Dialer()(t.Context(), tt.network, tt.addr)
			if err == nil {
				c.Close()
				t.Fatalf("dialling %s %s succeeded", tt.network, tt.addr)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not name %q", err, tt.want)
			}
		})
	}
	if st := s.All().Stats(); st.Accepted != 0 {
		t.Fatalf("the proxies accepted %d connections, want none", st.Accepted)
	}
	if s.For(other) != nil {
		t.Fatalf("For(%s) returned a proxy for an address that is not a target", other)
	}
}

func TestSet_faultsOnOneOrAll(t *testing.T) {
	s, targets := startSet(t, 2)
	c0, r0 := dialSet(t, s, targets[0])
	c1, r1 := dialSet(t, s, targets[1])

	// One: only target 0's traffic is held.
	s.For(targets[0]).BlackHole()
	c0.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := roundTrip(c0, r0, "held"); !isTimeout(err) {
		t.Fatalf("through the black-holed proxy: %v, want a timeout", err)
	}
	if got, err := roundTrip(c1, r1, "free"); err != nil || got != "free" {
		t.Fatalf("through the other proxy: %q, %v", got, err)
	}

	// All: Resume frees target 0; then a black hole holds both.
	all := s.All()
	all.Resume()
	c0.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := r0.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after Resume: %q, %v; want the held line", got, err)
	}
	all.BlackHole()
	for i, c := range []net.Conn{c0, c1} {
		r := []*bufio.Reader{r0, r1}[i]
		c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		if _, err := roundTrip(c, r, "y"); !isTimeout(err) {
			t.Fatalf("target %d through All().BlackHole: %v, want a timeout", i, err)
		}
	}
	if n := all.Conns(); n != 2 {
		t.Fatalf("All().Conns() = %d, want 2", n)
	}
	if n := all.Reset(); n != 2 {
		t.Fatalf("All().Reset() ended %d connections, want 2", n)
	}
	// Only the counter shows that the reset links are gone.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	redistest.WaitFor(t, ctx, "the reset connections to close", func() bool { return all.Conns() == 0 })
	c2, r2 := dialSet(t, s, targets[1])
	all.Resume()
	if _, err := roundTrip(c2, r2, "z"); err != nil { // the proxy has accepted it
		t.Fatal(err)
	}
	if n := all.Drop(); n != 1 {
		t.Fatalf("All().Drop() ended %d connections, want 1", n)
	}
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r2.ReadString('\n'); !errors.Is(err, io.EOF) {
		t.Fatalf("after Drop: %v, want EOF", err)
	}
	st := all.Stats()
	if st.Accepted != 3 || st.Reset != 2 || st.Dropped != 1 {
		t.Fatalf("All().Stats() = %+v, want 3 accepted, 2 reset, 1 dropped", st)
	}
	if a, b := s.For(targets[0]).Stats(), s.For(targets[1]).Stats(); a.Accepted+b.Accepted != st.Accepted || a.Chunks+b.Chunks != st.Chunks {
		t.Fatalf("All().Stats() = %+v is not the sum of %+v and %+v", st, a, b)
	}
}

func TestSet_closeClosesEveryProxy(t *testing.T) {
	targets := []string{echo(t), echo(t)}
	s, err := faultproxy.StartSet(append(targets, targets[0])...)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Targets(); len(got) != 2 {
		t.Fatalf("a target given twice: Targets() = %v, want 2 targets", got)
	}
	var conns []*bufio.Reader
	for _, target := range targets {
		c, r := dialSet(t, s, target)
		if _, err := roundTrip(c, r, "x"); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		conns = append(conns, r)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for i, r := range conns {
		if _, err := r.ReadString('\n'); err == nil {
			t.Fatalf("connection %d still open after Close", i)
		}
	}
	for _, target := range targets {
		if c, err := net.Dial("tcp", s.For(target).Addr()); err == nil {
			c.Close()
			t.Fatalf("the proxy for %s still accepts after Close", target)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := faultproxy.StartSet(); err == nil {
		t.Fatal("StartSet with no targets succeeded")
	}
}

// TestSet_redisCluster puts a Set between a go-redis ClusterClient and a
// real three-node cluster through ClusterOptions.Dialer. The client learns
// the topology from CLUSTER SLOTS, which names the nodes' real addresses,
// and every connection it makes still goes through a proxy; a black hole
// on one node's proxy makes that node's slots time out while keys on the
// other nodes keep working, also for a client that loads the topology
// while the node is black-holed.
func TestSet_redisCluster(t *testing.T) {
	srv := redistest.Start(t, redistest.Cluster)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	addrs := srv.Addrs()
	s, err := faultproxy.StartSet(addrs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	const read = 200 * time.Millisecond
	newClient := func(seeds ...string) *redis.ClusterClient {
		rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds, Dialer: s.Dialer(),
			DialTimeout: read, ReadTimeout: read, WriteTimeout: read, MaxRetries: -1, MaxRedirects: -1, DialerRetries: 1})
		t.Cleanup(func() { rc.Close() })
		return rc
	}

	// Seeded with one node, the client finds the others from CLUSTER SLOTS
	// and reaches them through their proxies.
	rc := newClient(addrs[0])
	keys := map[string]string{} // node address -> a key it serves
	for i := 0; len(keys) < len(addrs); i++ {
		if i == 10000 {
			t.Fatalf("no key found for every node: %v", keys)
		}
		key := "k" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		node, err := rc.MasterForKey(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		addr := node.Options().Addr
		if s.For(addr) == nil {
			t.Fatalf("the client learned address %s, which is no node of %v", addr, addrs)
		}
		if _, ok := keys[addr]; !ok {
			keys[addr] = key
		}
	}
	for addr, key := range keys {
		if err := rc.Set(ctx, key, addr, time.Minute).Err(); err != nil {
			t.Fatalf("SET %s on %s: %v", key, addr, err)
		}
	}
	for _, addr := range addrs {
		if st := s.For(addr).Stats(); st.Accepted == 0 {
			t.Fatalf("node %s was reached without its proxy: %+v", addr, st)
		}
	}

	holed, holedKey := addrs[1], keys[addrs[1]]
	s.For(holed).BlackHole()
	check := func(rc *redis.ClusterClient, who string) {
		t.Helper()
		for addr, key := range keys {
			start := time.Now()
			v, err := rc.Get(ctx, key).Result()
			took := time.Since(start)
			if addr == holed {
				var ne net.Error
				if !errors.As(err, &ne) || !ne.Timeout() {
					t.Errorf("%s: GET %s on the black-holed node: %q, %v; want a timeout", who, key, v, err)
				}
				t.Logf("%s: GET on the black-holed node failed after %v (ReadTimeout %v)", who, took.Round(time.Millisecond), read)
				continue
			}
			if err != nil || v != addr {
				t.Errorf("%s: GET %s on %s while %s is black-holed: %q, %v", who, key, addr, holed, v, err)
			}
		}
	}
	check(rc, "client seeded with one node")
	// A new client loads the topology while one node is black-holed: it
	// asks the nodes in random order, so it may wait out the black hole
	// once, and then serves the others' slots.
	check(newClient(addrs...), "client started during the black hole")

	s.For(holed).Resume()
	if v, err := rc.Get(ctx, holedKey).Result(); err != nil || v != holed {
		t.Errorf("after Resume: GET %s = %q, %v", holedKey, v, err)
	}
}
