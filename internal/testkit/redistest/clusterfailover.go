package redistest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartClusterWithReplica starts a Cluster (Kind Cluster) of three masters
// and one replica of the first master, all with cluster-node-timeout
// nodeTimeout, so that killing the first master (KillNode(0)) promotes
// the replica about a node timeout and a second later. Addrs lists the
// masters, then the replica. It skips or fails tb as Start does and stops
// the Cluster in tb.Cleanup.
func StartClusterWithReplica(tb testing.TB, nodeTimeout time.Duration) *Server {
	tb.Helper()
	return StartClusterWithReplicaOf(tb, Redis8, nodeTimeout)
}

// StartClusterWithReplicaOf is StartClusterWithReplica with the server
// binary of kind (Redis8 or Valkey).
func StartClusterWithReplicaOf(tb testing.TB, kind Kind, nodeTimeout time.Duration) *Server {
	tb.Helper()
	s, err := startClusterWithReplica(kind, tb.TempDir(), nodeTimeout)
	if err != nil {
		missing(tb, err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// LaunchClusterWithReplicas starts, outside a test, a Cluster (Kind
// Cluster) of three masters with one replica each, its files under dir,
// every node with cluster-node-timeout nodeTimeout and the extra server
// arguments; Stop ends it. Addrs lists the masters, then their replicas
// in the same order: Addrs()[3+i] replicates Addrs()[i] until a failover
// swaps their roles.
func LaunchClusterWithReplicas(kind Kind, dir string, nodeTimeout time.Duration, extra ...string) (*Server, error) {
	return startClusterWithReplicas(kind, dir, nodeTimeout, 3, extra...)
}

func startClusterWithReplica(kind Kind, dir string, nodeTimeout time.Duration) (*Server, error) {
	return startClusterWithReplicas(kind, dir, nodeTimeout, 1)
}

// startClusterWithReplicas starts three masters and replicas replicas,
// the i-th of them a replica of master i.
func startClusterWithReplicas(kind Kind, dir string, nodeTimeout time.Duration, replicas int, extra ...string) (*Server, error) {
	bin, env := Binary(kind)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s server binary %s (set %s): %w", kind, bin, env, errMissing)
	}
	s := &Server{Kind: Cluster}
	for i := range 3 + replicas {
		// The master sends its first full copy at once, not after the 5 s
		// a diskless sync waits by default for more replicas.
		nd := &node{bin: bin, dir: filepath.Join(dir, strconv.Itoa(i)), nodeTimeout: nodeTimeout,
			extra: append([]string{"--repl-diskless-sync-delay", "0"}, extra...)}
		if err := os.MkdirAll(nd.dir, 0o755); err != nil {
			s.Stop()
			return nil, err
		}
		if err := nd.start(true); err != nil {
			s.Stop()
			return nil, err
		}
		s.nodes = append(s.nodes, nd)
	}
	if err := s.formCluster(3); err != nil {
		s.Stop()
		return nil, err
	}
	for i := range replicas {
		if err := s.replicate(s.nodes[3+i], s.nodes[i]); err != nil {
			s.Stop()
			return nil, err
		}
	}
	return s, nil
}

// replicate makes replica a replica of master and waits until the master
// reports it online and every master knows it is a replica.
func (s *Server) replicate(replica, master *node) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m := redis.NewClient(&redis.Options{Addr: master.addr()})
	defer m.Close()
	r := redis.NewClient(&redis.Options{Addr: replica.addr()})
	defer r.Close()
	id, err := m.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return fmt.Errorf("cluster myid: %w", err)
	}
	for {
		// CLUSTER REPLICATE needs the replica to know the master, which
		// the gossip of formCluster's MEET brings in its own time.
		err := r.Do(ctx, "CLUSTER", "REPLICATE", id).Err()
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster replicate: %w (%w)", err, ctx.Err())
		case <-time.After(50 * time.Millisecond): // polling is the only readiness signal
		}
	}
	for {
		info, err := m.Info(ctx, "replication").Result()
		ready := err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
		for _, nd := range s.nodes[:3] {
			if !ready {
				break
			}
			c := redis.NewClient(&redis.Options{Addr: nd.addr()})
			nodes, err := c.ClusterNodes(ctx).Result()
			c.Close()
			ready = err == nil && replicaListed(nodes, replica.addr(), id)
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the replica did not come online: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond): // polling is the only readiness signal
		}
	}
}

// replicaListed says whether CLUSTER NODES output lists the node at addr
// as a replica of the node whose ID is master (its flags may say more:
// "slave,nofailover").
func replicaListed(nodes, addr, master string) bool {
	for _, line := range strings.Split(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && strings.HasPrefix(f[1], addr+"@") && strings.Contains(","+f[2]+",", ",slave,") && f[3] == master {
			return true
		}
	}
	return false
}

// KillNode stops process i of the server (in Addrs order) at once, with
// SIGKILL, as a crash would.
func (s *Server) KillNode(i int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes[i].kill()
}

// PauseNode stops process i of the server (in Addrs order) with SIGSTOP:
// it holds its connections and answers nothing, as a hung host does.
// ResumeNode continues it; KillNode ends it.
func (s *Server) PauseNode(i int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	nd := s.nodes[i]
	if nd.cmd == nil {
		return fmt.Errorf("redistest: %s is not running", nd.addr())
	}
	return nd.cmd.Process.Signal(syscall.SIGSTOP)
}

// ResumeNode continues process i of the server (in Addrs order) after
// PauseNode, with SIGCONT: it answers what it was sent meanwhile.
func (s *Server) ResumeNode(i int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	nd := s.nodes[i]
	if nd.cmd == nil {
		return fmt.Errorf("redistest: %s is not running", nd.addr())
	}
	return nd.cmd.Process.Signal(syscall.SIGCONT)
}

// WaitMaster waits until process i of a Cluster says it is a master (a
// replica promoted after its master died), or ctx ends.
func (s *Server) WaitMaster(ctx context.Context, i int) error {
	addrs := s.Addrs()
	c := redis.NewClient(&redis.Options{Addr: addrs[i]})
	defer c.Close()
	for {
		role, err := c.Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("redistest: node %s not promoted: %w", addrs[i], ctx.Err())
		case <-time.After(10 * time.Millisecond): // polling is the only signal a promotion gives here
		}
	}
}

// ClusterFailover makes process i of a Cluster, a replica, take over its
// master's slots, with CLUSTER FAILOVER (graceful: the master stops taking
// writes until the replica has caught up, and the replica is elected by
// the masters) or, with takeover set, CLUSTER FAILOVER TAKEOVER (no
// agreement with the master or the other masters: the old master goes on
// taking writes until it learns of the new epoch). It returns once
// process i says it is a master, or ctx ends.
//
// WARNING: a graceful failover of a replica that ran an election less
// than four node timeouts ago (at least 4 s; see Electable) does not
// work on Redis 8.6, which keeps an election's state that long: the
// replica logs at once that it won, under its old epoch, and the Cluster
// turns it back into a replica within milliseconds, while its master
// holds writes until the manual failover times out (5 s).
// ClusterFailover may return during that moment as a master.
func (s *Server) ClusterFailover(ctx context.Context, i int, takeover bool) error {
	addrs := s.Addrs()
	c := redis.NewClient(&redis.Options{Addr: addrs[i]})
	defer c.Close()
	args := []any{"CLUSTER", "FAILOVER"}
	if takeover {
		args = append(args, "TAKEOVER")
	}
	if !takeover {
		s.mu.Lock()
		s.nodes[i].elected = time.Now()
		s.mu.Unlock()
	}
	if err := c.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("redistest: %v on %s: %w", args, addrs[i], err)
	}
	return s.WaitMaster(ctx, i)
}

// Electable says whether a graceful ClusterFailover of process i can be
// won now: whether its last election, if ClusterFailover ran one, began
// more than four node timeouts ago (at least 4 s), the time Redis keeps an
// election's state.
func (s *Server) Electable(i int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	nd := s.nodes[i]
	timeout := 5 * time.Second
	if nd.nodeTimeout > 0 {
		timeout = nd.nodeTimeout
	}
	return time.Since(nd.elected) > 2*max(2*timeout, 2*time.Second)
}

// WaitDialsEnd waits until go-redis's background dials of closed clients'
// dead nodes have ended: a pool whose dial failed retries it every second
// until it sees it was closed, and the test binary's leak check would take
// that goroutine for a leak. Call it after closing a client that talked to
// a node KillNode stopped.
func WaitDialsEnd(tb testing.TB) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if !bytes.Contains(buf[:n], []byte("pool.(*ConnPool).tryDial")) {
			return
		}
		if time.Now().After(deadline) {
			tb.Errorf("redistest: go-redis still dials a closed client's node 5s after Close")
			return
		}
		time.Sleep(50 * time.Millisecond) // the goroutine's end gives no other signal
	}
}
