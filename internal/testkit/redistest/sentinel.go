package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name under which a Sentinel group monitors its master.
const MasterName = "stampede"

// Sentinel timeouts, short for tests: a master silent for
// sentinelDownAfter is down, and a failover that stalls is retried after
// sentinelFailoverTimeout.
const (
	sentinelDownAfter       = 500 * time.Millisecond
	sentinelFailoverTimeout = 2 * time.Second
)

// Sentinel is a master, a replica of it and three Sentinels monitoring
// them (quorum 2), all of one kind (Redis8 or Valkey) on free loopback
// ports. Its methods are safe for concurrent use.
type Sentinel struct {
	Kind Kind

	mu        sync.Mutex
	data      []*node // the master and the replica, in start order
	sentinels []*node
}

// StartSentinel starts a Sentinel group of the given kind (Redis8 or
// Valkey) for tb, waits until every Sentinel knows the replica and the
// other Sentinels (so that a failover can be agreed), and stops it in
// tb.Cleanup. It skips or fails tb as Start does.
func StartSentinel(tb testing.TB, kind Kind) *Sentinel {
	tb.Helper()
	s, err := startSentinel(kind, tb.TempDir())
	if err != nil {
		missing(tb, err)
	}
	tb.Cleanup(s.Stop)
	return s
}

func startSentinel(kind Kind, dir string) (*Sentinel, error) {
	if kind != Redis8 && kind != Valkey {
		return nil, fmt.Errorf("no Sentinel group of kind %q", kind)
	}
	bin, env := Binary(kind)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s server binary %s (set %s): %w", kind, bin, env, errMissing)
	}
	s := &Sentinel{Kind: kind}
	mk := func(name string) (*node, error) {
		nd := &node{bin: bin, dir: filepath.Join(dir, name)}
		return nd, os.MkdirAll(nd.dir, 0o755)
	}
	master, err := mk("master")
	if err != nil {
		return nil, err
	}
	if err := master.start(false); err != nil {
		return nil, err
	}
	s.data = append(s.data, master)
	replica, err := mk("replica")
	if err != nil {
		s.Stop()
		return nil, err
	}
	replica.extra = []string{"--replicaof", "127.0.0.1", strconv.Itoa(master.port)}
	if err := replica.start(false); err != nil {
		s.Stop()
		return nil, err
	}
	s.data = append(s.data, replica)
	conf := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]d 2\n"+
		"sentinel down-after-milliseconds %[1]s %[3]d\n"+
		"sentinel failover-timeout %[1]s %[4]d\n"+
		"sentinel parallel-syncs %[1]s 1\n",
		MasterName, master.port, sentinelDownAfter.Milliseconds(), sentinelFailoverTimeout.Milliseconds())
	for i := range 3 {
		nd, err := mk("sentinel" + strconv.Itoa(i))
		if err == nil {
			nd.sentinel = true
			err = os.WriteFile(filepath.Join(nd.dir, "sentinel.conf"), []byte(conf), 0o644)
		}
		if err == nil {
			err = nd.start(false)
		}
		if err != nil {
			s.Stop()
			return nil, err
		}
		s.sentinels = append(s.sentinels, nd)
	}
	if err := s.ready(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// ready waits until the replica's link is up and every Sentinel knows
// the replica and the two other Sentinels.
func (s *Sentinel) ready() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rc := redis.NewClient(&redis.Options{Addr: s.data[1].addr()})
	defer rc.Close()
	for {
		ok := false
		if info, err := rc.Info(ctx, "replication").Result(); err == nil && strings.Contains(info, "master_link_status:up") {
			ok = true
			for _, nd := range s.sentinels {
				if !sentinelKnows(ctx, nd.addr()) {
					ok = false
					break
				}
			}
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sentinel group not ready: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond): // INFO and SENTINEL replies are the only readiness signal
		}
	}
}

// sentinelKnows reports whether the Sentinel at addr knows a replica and
// two other Sentinels.
func sentinelKnows(ctx context.Context, addr string) bool {
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sc.Close()
	replicas, err := sc.Replicas(ctx, MasterName).Result()
	if err != nil || len(replicas) == 0 {
		return false
	}
	others, err := sc.Sentinels(ctx, MasterName).Result()
	return err == nil && len(others) == 2
}

// SentinelAddrs returns the Sentinels' addresses.
func (s *Sentinel) SentinelAddrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, nd := range s.sentinels {
		out = append(out, nd.addr())
	}
	return out
}

// Addrs returns the addresses of the master and the replica, in start
// order (the first was the master at start).
func (s *Sentinel) Addrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, nd := range s.data {
		out = append(out, nd.addr())
	}
	return out
}

// Options returns the options of a failover client of the group. They
// name the first Sentinel only (the client discovers the others), so that
// every client of a test asks the same Sentinel: Sentinels learn of a
// switch moments apart, and clients asking different ones may follow
// different masters meanwhile.
func (s *Sentinel) Options() *redis.FailoverOptions {
	return &redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: s.SentinelAddrs()[:1]}
}

// NewClient returns a failover client (redis.NewFailoverClient) of the
// group with Options; the caller closes it.
func (s *Sentinel) NewClient() *redis.Client { return redis.NewFailoverClient(s.Options()) }

// Client is NewClient, closed in tb.Cleanup.
func (s *Sentinel) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := s.NewClient()
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Master returns the master's address as the first Sentinel that
// answers says.
func (s *Sentinel) Master(ctx context.Context) (string, error) {
	var errs []error
	for _, addr := range s.SentinelAddrs() {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
		hp, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
		_ = sc.Close()
		if err == nil && len(hp) == 2 {
			return net.JoinHostPort(hp[0], hp[1]), nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("redistest: no Sentinel named the master: %w", errors.Join(errs...))
}

// Failover asks a Sentinel for a failover (SENTINEL FAILOVER: the
// replica is promoted without the master being down) and waits until
// every Sentinel names a master other than from.
func (s *Sentinel) Failover(ctx context.Context) (from, to string, err error) {
	if from, err = s.Master(ctx); err != nil {
		return "", "", err
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.SentinelAddrs()[0]})
	err = sc.Failover(ctx, MasterName).Err()
	_ = sc.Close()
	if err != nil {
		return from, "", fmt.Errorf("redistest: sentinel failover: %w", err)
	}
	to, err = s.WaitSwitch(ctx, from)
	return from, to, err
}

// WaitSwitch waits until every Sentinel names a master other than from,
// and returns it.
func (s *Sentinel) WaitSwitch(ctx context.Context, from string) (string, error) {
	for {
		to, agreed := "", true
		for _, addr := range s.SentinelAddrs() {
			sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
			hp, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
			_ = sc.Close()
			if err != nil || len(hp) != 2 {
				agreed = false
				break
			}
			a := net.JoinHostPort(hp[0], hp[1])
			if a == from || to != "" && a != to {
				agreed = false
				break
			}
			to = a
		}
		if agreed {
			return to, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("redistest: the Sentinels did not leave master %s: %w (%s)", from, ctx.Err(), s.logs())
		case <-time.After(20 * time.Millisecond): // SENTINEL replies are the only signal of a switch
		}
	}
}

// Switch is when a failover happened, as WatchSwitch saw it.
type Switch struct {
	// Promoted: the replica was promoted after this (the last time it
	// answered ROLE as a replica).
	Promoted time.Time
	// Named: by this time the Sentinel that clients ask (the first; see
	// Options) named the new master, the moment a client following it can
	// know of the switch (the other Sentinels hear of it up to seconds
	// later).
	Named time.Time
}

// WatchSwitch watches, from now on, the replica of the master at from and
// the Sentinel that clients ask, asking each every millisecond, and sends
// on the channel it returns once the replica answers ROLE as a master and
// the Sentinel names a master other than from. It gives up when ctx ends,
// and the channel is then closed.
func (s *Sentinel) WatchSwitch(ctx context.Context, from string) <-chan Switch {
	ch := make(chan Switch, 1)
	var replica string
	for _, a := range s.Addrs() {
		if a != from {
			replica = a
		}
	}
	rc := redis.NewClient(&redis.Options{Addr: replica})
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.SentinelAddrs()[0]})
	go func() {
		defer close(ch)
		defer rc.Close()
		defer sc.Close()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		var sw Switch
		promoted := false
		for {
			if !promoted {
				role, err := rc.Do(ctx, "ROLE").Slice()
				if err == nil && len(role) > 0 && role[0] == "master" {
					promoted = true
				} else if err == nil {
					sw.Promoted = time.Now()
				}
			}
			if sw.Named.IsZero() {
				hp, err := sc.GetMasterAddrByName(ctx, MasterName).Result()
				if err == nil && len(hp) == 2 && net.JoinHostPort(hp[0], hp[1]) != from {
					sw.Named = time.Now()
				}
			}
			if promoted && !sw.Named.IsZero() {
				ch <- sw
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C: // ROLE and SENTINEL replies are the only signals of a switch
			}
		}
	}()
	return ch
}

// dataNode returns the master or replica listening on addr.
func (s *Sentinel) dataNode(addr string) (*node, error) {
	for _, nd := range s.data {
		if nd.addr() == addr {
			return nd, nil
		}
	}
	return nil, fmt.Errorf("redistest: no server at %s in the group", addr)
}

// Pause stops the server at addr (SIGSTOP): it holds its connections
// and answers nothing, as a hung host does.
func (s *Sentinel) Pause(addr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	nd, err := s.dataNode(addr)
	if err != nil {
		return err
	}
	if nd.cmd == nil {
		return fmt.Errorf("redistest: %s is not running", addr)
	}
	return nd.cmd.Process.Signal(syscall.SIGSTOP)
}

// Kill ends the server at addr (SIGKILL), paused or not.
func (s *Sentinel) Kill(addr string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	nd, err := s.dataNode(addr)
	if err != nil {
		return err
	}
	nd.kill()
	return nil
}

// Lag cuts the replica off from its master's replication stream and
// returns its address, as a broken replication link does: the replica's
// AUTH to the master is refused from now on (its masterauth is set to a
// password the master does not have) and its link is closed. The replica
// keeps what it had applied, answers clients and Sentinels, and tries to
// connect again every second, in vain; the master goes on acknowledging
// writes (replication is asynchronous), which the replica never receives.
// A failover within ten times down-after-milliseconds (Sentinels pass over
// a replica whose link has been down longer) promotes it without them.
func (s *Sentinel) Lag(ctx context.Context) (string, error) {
	master, err := s.Master(ctx)
	if err != nil {
		return "", err
	}
	var replica string
	for _, a := range s.Addrs() {
		if a != master {
			replica = a
		}
	}
	rc := redis.NewClient(&redis.Options{Addr: replica})
	defer rc.Close()
	if err := rc.ConfigSet(ctx, "masterauth", "not-the-masters-password").Err(); err != nil {
		return "", fmt.Errorf("redistest: lag %s: %w", replica, err)
	}
	n, err := rc.ClientKillByFilter(ctx, "TYPE", "master").Result()
	if err != nil || n != 1 {
		return "", fmt.Errorf("redistest: lag %s: CLIENT KILL TYPE master = %d, %v; want its one link to %s closed", replica, n, err, master)
	}
	return replica, nil
}

// Stop stops every process of the group and waits for them to exit.
func (s *Sentinel) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, nd := range s.sentinels {
		nd.kill()
	}
	for _, nd := range s.data {
		nd.kill() // SIGKILL ends a paused process too
	}
}

// logs returns the last lines of the Sentinels' logs, for a failure.
func (s *Sentinel) logs() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, nd := range s.sentinels {
		log, _ := os.ReadFile(filepath.Join(nd.dir, "server.log"))
		fmt.Fprintf(&b, "sentinel %s: %s; ", nd.addr(), lastLines(string(log), 8))
	}
	return b.String()
}
