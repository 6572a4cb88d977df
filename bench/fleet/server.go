package main

import (
	"context"
	"os"
	"strconv"
	"strings"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// server is a Redis 8 server, or a Cluster of three masters, that the run
// started on loopback (internal/testkit/redistest, from $STAMPEDE_REDIS8) and
// stops at the end.
type server struct {
	srv   *redistest.Server
	addrs []string
	dir   string
}

// startServer starts one server, or with cluster three masters sharing
// the slots evenly.
func startServer(_ context.Context, cluster bool) (*server, error) {
	kind := redistest.Redis8
	if cluster {
		kind = redistest.Cluster
	}
	dir, err := os.MkdirTemp("", "fleet13-")
	if err != nil {
		return nil, err
	}
	srv, err := redistest.Launch(kind, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &server{srv: srv, addrs: srv.Addrs(), dir: dir}, nil
}

// stop stops the server's processes and removes its folder.
func (s *server) stop() {
	s.srv.Stop()
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
	counters := map[string]*int64{
		"total_net_output_bytes":  &st.netOut,
		"used_memory":             &st.memory,
		"mem_clients_normal":      &st.clMem,
		"connected_clients":       &st.clients,
		"tracking_total_keys":     &st.trackKeys,
		"tracking_total_items":    &st.trackItems,
		"tracking_total_prefixes": &st.trackPrefixes,
	}
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
			if k == "used_cpu_sys" || k == "used_cpu_user" {
				f, _ := strconv.ParseFloat(v, 64)
				st.cpu += f
			} else if p := counters[k]; p != nil {
				n, _ := strconv.ParseInt(v, 10, 64)
				*p += n
			}
		}
	}
	return st, nil
}
