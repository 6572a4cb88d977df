package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/toolkit/embedded"
	"github.com/redis/go-redis/v9"
)

// Kind names a server flavour.
type Kind string

const (
	Redis7    Kind = "redis7"    // Debian bookworm's Redis 7.0: Lua fallbacks only
	Redis8    Kind = "redis8"    // Redis >= 8.4: DELEX, DIGEST, IFEQ/IFDEQ
	Valkey    Kind = "valkey"    // Valkey >= 9.0: DELIFEQ, SET IFEQ
	Cluster   Kind = "cluster"   // three Redis >= 8.4 masters
	Miniredis Kind = "miniredis" // in-process, Lua only
)

// Kinds returns every kind, in the order tests run them.
func Kinds() []Kind { return []Kind{Redis7, Redis8, Valkey, Cluster, Miniredis} }

// Binary returns the server binary for kind and the environment variable
// that overrides it.
func Binary(kind Kind) (path, env string) {
	home, _ := os.UserHomeDir()
	cache := filepath.Join(home, ".cache", "stampede", "bin")
	switch kind {
	case Redis7:
		path, env = "/usr/bin/redis-server", "STAMPEDE_REDIS7"
	case Redis8, Cluster:
		path, env = filepath.Join(cache, "redis-server"), "STAMPEDE_REDIS8"
	case Valkey:
		path, env = filepath.Join(cache, "valkey-server"), "STAMPEDE_VALKEY"
	}
	if v := os.Getenv(env); v != "" && env != "" {
		path = v
	}
	return path, env
}

// Server is a running server (or cluster). Its methods are safe for
// concurrent use.
type Server struct {
	Kind Kind

	mu    sync.Mutex
	nodes []*node // one per process; empty for miniredis
	mini  *embedded.Server
}

type node struct {
	bin, dir          string
	port, clusterPort int
	cmd               *exec.Cmd
	exited            chan struct{}

	// sentinel: the process is a Sentinel, configured by dir/sentinel.conf
	// (see StartSentinel); extra: arguments appended to a server's.
	sentinel bool
	extra    []string

	// nodeTimeout, if set, is a cluster node's cluster-node-timeout (else
	// 5 s): how long a silent master goes before its replica takes over.
	nodeTimeout time.Duration
	// elected is when ClusterFailover last had the node, a replica, run
	// an election (a graceful failover); guarded by Server.mu.
	elected time.Time
}

// Start starts a server of the given kind for tb and stops it in
// tb.Cleanup. It skips tb (or, with CI=true, fails it) when the binary is
// missing.
func Start(tb testing.TB, kind Kind) *Server {
	tb.Helper()
	s, err := start(kind, tb.TempDir())
	if err != nil {
		missing(tb, err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// StartWith is Start with extra server arguments, appended to every
// process's command line after this package's own (so they override
// them), e.g. "--appendonly", "yes". They also apply after Restart.
func StartWith(tb testing.TB, kind Kind, extra ...string) *Server {
	tb.Helper()
	s, err := start(kind, tb.TempDir(), extra...)
	if err != nil {
		missing(tb, err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Launch starts a server of the given kind outside a test (for tools such
// as bench/fleet), its files under dir; Stop ends it.
func Launch(kind Kind, dir string) (*Server, error) { return start(kind, dir) }

// LaunchWith is Launch with extra server arguments, as StartWith takes
// them. Miniredis takes none.
func LaunchWith(kind Kind, dir string, extra ...string) (*Server, error) {
	return start(kind, dir, extra...)
}

// errMissing marks a server binary that is not installed.
var errMissing = errors.New("not installed")

func missing(tb testing.TB, err error) {
	tb.Helper()
	if errors.Is(err, errMissing) && os.Getenv("CI") != "true" {
		tb.Skipf("redistest: %v (run scripts/provision.sh)", err)
	}
	tb.Fatalf("redistest: %v", err)
}

func start(kind Kind, dir string, extra ...string) (*Server, error) {
	s := &Server{Kind: kind}
	switch kind {
	case Miniredis:
		if len(extra) > 0 {
			return nil, errors.New("redistest: miniredis takes no server arguments")
		}
		m, err := embedded.Start()
		if err != nil {
			return nil, err
		}
		s.mini = m
		return s, nil
	case Redis7, Redis8, Valkey, Cluster:
	default:
		return nil, fmt.Errorf("unknown server kind %q", kind)
	}
	bin, env := Binary(kind)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("%s server binary %s (set %s): %w", kind, bin, env, errMissing)
	}
	n := 1
	if kind == Cluster {
		n = 3
	}
	for i := range n {
		nd := &node{bin: bin, dir: filepath.Join(dir, strconv.Itoa(i)), extra: extra}
		if err := os.MkdirAll(nd.dir, 0o755); err != nil {
			s.Stop()
			return nil, err
		}
		if err := nd.start(kind == Cluster); err != nil {
			s.Stop()
			return nil, err
		}
		s.nodes = append(s.nodes, nd)
	}
	if kind == Cluster {
		if err := s.formCluster(len(s.nodes)); err != nil {
			s.Stop()
			return nil, err
		}
	}
	return s, nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start launches the process, choosing new ports when the chosen one was
// taken in between (the process then exits at once).
func (nd *node) start(cluster bool) error {
	var last error
	for range 5 {
		if nd.port == 0 || last != nil {
			p, err := freePort()
			if err != nil {
				return err
			}
			nd.port = p
			if cluster {
				if nd.clusterPort, err = freePort(); err != nil {
					return err
				}
			}
		}
		if last = nd.launch(cluster); last == nil {
			return nil
		}
	}
	return last
}

func (nd *node) launch(cluster bool) error {
	args := []string{"--port", strconv.Itoa(nd.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", nd.dir, "--daemonize", "no", "--loglevel", "warning", "--logfile", filepath.Join(nd.dir, "server.log")}
	if nd.sentinel {
		// The configuration file comes first, and Sentinel rewrites it.
		args = append([]string{filepath.Join(nd.dir, "sentinel.conf"), "--sentinel"}, args[:4]...)
		args = append(args, "--dir", nd.dir, "--daemonize", "no", "--loglevel", "notice", "--logfile", filepath.Join(nd.dir, "server.log"))
	}
	args = append(args, nd.extra...)
	if cluster {
		timeout := 5 * time.Second
		if nd.nodeTimeout > 0 {
			timeout = nd.nodeTimeout
		}
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(nd.dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(nd.clusterPort), "--cluster-node-timeout", strconv.FormatInt(timeout.Milliseconds(), 10))
	}
	cmd := exec.Command(nd.bin, args...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", nd.bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	nd.cmd, nd.exited = cmd, exited

	c := redis.NewClient(&redis.Options{Addr: nd.addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(nd.dir, "server.log"))
			return fmt.Errorf("%s on port %d exited at start: %s", nd.bin, nd.port, lastLines(string(log), 5))
		case <-time.After(20 * time.Millisecond): // polling is the only readiness signal a server gives
		}
		if time.Now().After(deadline) {
			nd.kill()
			return fmt.Errorf("%s on port %d: no PING answer after 10s: %v", nd.bin, nd.port, err)
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func (nd *node) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(nd.port)) }

func (nd *node) kill() {
	if nd.cmd == nil {
		return
	}
	_ = nd.cmd.Process.Kill()
	<-nd.exited
	nd.cmd = nil
}

// Addrs returns the addresses of the server's processes.
func (s *Server) Addrs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mini != nil {
		return []string{s.mini.Addr()}
	}
	var out []string
	for _, nd := range s.nodes {
		out = append(out, nd.addr())
	}
	return out
}

// Client returns a new client for the server (a ClusterClient for a
// cluster), closed in tb.Cleanup.
func (s *Server) Client(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	c := s.NewClient()
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// NewClient returns a new client for the server; the caller closes it.
func (s *Server) NewClient() redis.UniversalClient {
	return NewClient(s.Kind == Cluster, s.Addrs())
}

// NewClient returns a client for addrs, a ClusterClient if cluster is set.
func NewClient(cluster bool, addrs []string) redis.UniversalClient {
	if cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	}
	return redis.NewClient(&redis.Options{Addr: addrs[0]})
}

// Kill stops every process of the server at once (SIGKILL), keeping their
// ports so that Restart brings the server back at the same address. For
// miniredis it closes the listener.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mini != nil {
		s.mini.Kill()
		return
	}
	for _, nd := range s.nodes {
		nd.kill()
	}
}

// Restart starts a killed server again on the same ports, empty.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mini != nil {
		return s.mini.Restart()
	}
	if s.Kind == Cluster {
		return errors.New("redistest: restarting a cluster is not supported")
	}
	for _, nd := range s.nodes {
		if nd.cmd == nil {
			if err := nd.launch(false); err != nil {
				return err
			}
		}
	}
	return nil
}

// Stop stops the server and waits for its processes to exit.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mini != nil {
		s.mini.Close()
	}
	for _, nd := range s.nodes {
		nd.kill()
	}
}
