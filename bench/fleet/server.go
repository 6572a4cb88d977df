package main

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
	"time"

	"github.com/hotkv/stampede/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// server is a Redis server, or a Cluster of three masters, that the run
// started on loopback and stops at the end.
type server struct {
	cluster bool
	addrs   []string
	cmds    []*exec.Cmd
	dir     string
}

// startServer starts the Redis >= 8.4 binary the tests use
// ($STAMPEDE_REDIS8, see internal/redistest): one server, or with cluster
// three masters sharing the slots evenly.
func startServer(ctx context.Context, cluster bool) (*server, error) {
	bin, env := redistest.Binary(redistest.Redis8)
	if _, err := os.Stat(bin); err != nil {
		return nil, fmt.Errorf("redis server binary %s (set %s): %w", bin, env, err)
	}
	dir, err := os.MkdirTemp("", "fleet13-")
	if err != nil {
		return nil, err
	}
	s := &server{cluster: cluster, dir: dir}
	n := 1
	if cluster {
		n = 3
	}
	var busPorts []int
	for i := range n {
		port, bus, err := s.launch(ctx, bin, filepath.Join(dir, strconv.Itoa(i)), cluster)
		if err != nil {
			s.stop()
			return nil, err
		}
		s.addrs = append(s.addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		busPorts = append(busPorts, bus)
	}
	if cluster {
		if err := formCluster(ctx, s.addrs, busPorts[0]); err != nil {
			s.stop()
			return nil, err
		}
	}
	return s, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// launch starts one server process and waits until it answers PING.
func (s *server) launch(ctx context.Context, bin, dir string, cluster bool) (port, bus int, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	if port, err = freePort(); err != nil {
		return 0, 0, err
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--loglevel", "warning", "--logfile", filepath.Join(dir, "server.log"),
		"--maxclients", "10000"}
	if cluster {
		if bus, err = freePort(); err != nil {
			return 0, 0, err
		}
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", "5000")
	}
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	s.cmds = append(s.cmds, cmd)
	c := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err = c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return port, bus, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			return 0, 0, fmt.Errorf("%s on port %d: %v: %s", bin, port, err, strings.TrimSpace(string(log)))
		}
		time.Sleep(20 * time.Millisecond) // PING is the only readiness signal a server gives
	}
}

// formCluster gives each node an even share of the slots, introduces them
// and waits for cluster_state:ok on all.
func formCluster(ctx context.Context, addrs []string, bus0 int) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	per := 16384 / len(addrs)
	clients := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: a})
		defer clients[i].Close()
		lo, hi := i*per, (i+1)*per-1
		if i == len(addrs)-1 {
			hi = 16383
		}
		if err := clients[i].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("cluster addslotsrange: %w", err)
		}
		if i > 0 {
			host, port, _ := net.SplitHostPort(addrs[0])
			if err := clients[i].Do(ctx, "CLUSTER", "MEET", host, port, bus0).Err(); err != nil {
				return fmt.Errorf("cluster meet: %w", err)
			}
		}
	}
	for {
		ready := true
		for _, c := range clients {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(addrs))) {
				ready = false
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.New("cluster did not reach cluster_state:ok")
		case <-time.After(50 * time.Millisecond): // CLUSTER INFO is the only readiness signal
		}
	}
}

// stop kills the server's processes and removes its folder.
func (s *server) stop() {
	for _, c := range s.cmds {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	s.cmds = nil
	_ = os.RemoveAll(s.dir)
}

// nodeStats is what the controller reads from INFO on every node, summed.
type nodeStats struct {
	netOut  int64   // total_net_output_bytes
	cpu     float64 // used_cpu_sys + used_cpu_user, seconds
	memory  int64   // used_memory
	clMem   int64   // mem_clients_normal: client buffers, which come and go with traffic
	clients int64   // connected_clients

	// The server's tracking table (CLIENT TRACKING): keys some client
	// read and will be told of, (client, key) pairs, BCAST prefixes.
	trackKeys, trackItems, trackPrefixes int64
}

// info reads INFO stats, cpu, memory and clients from every node of s
// (through one client per node) and sums them.
func info(ctx context.Context, nodes []*redis.Client) (nodeStats, error) {
	var st nodeStats
	for _, c := range nodes {
		txt, err := c.Info(ctx, "stats", "cpu", "memory", "clients").Result()
		if err != nil {
			return st, err
		}
		for _, line := range strings.Split(txt, "\r\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch k {
			case "total_net_output_bytes":
				n, _ := strconv.ParseInt(v, 10, 64)
				st.netOut += n
			case "used_cpu_sys", "used_cpu_user":
				f, _ := strconv.ParseFloat(v, 64)
				st.cpu += f
			case "used_memory":
				n, _ := strconv.ParseInt(v, 10, 64)
				st.memory += n
			case "mem_clients_normal":
				n, _ := strconv.ParseInt(v, 10, 64)
				st.clMem += n
			case "connected_clients":
				n, _ := strconv.ParseInt(v, 10, 64)
				st.clients += n
			case "tracking_total_keys":
				n, _ := strconv.ParseInt(v, 10, 64)
				st.trackKeys += n
			case "tracking_total_items":
				n, _ := strconv.ParseInt(v, 10, 64)
				st.trackItems += n
			case "tracking_total_prefixes":
				n, _ := strconv.ParseInt(v, 10, 64)
				st.trackPrefixes += n
			}
		}
	}
	return st, nil
}
