package redistest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// formCluster splits the 16384 slots evenly over the first masters nodes,
// introduces every node to the first and waits until every node reports
// cluster_state:ok and knows every other node.
func (s *Server) formCluster(masters int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clients := make([]*redis.Client, len(s.nodes))
	for i, nd := range s.nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: nd.addr()})
		defer clients[i].Close()
	}
	per := 16384 / masters
	for i, c := range clients {
		lo, hi := i*per, (i+1)*per-1
		if i == masters-1 {
			hi = 16383
		}
		if i < masters {
			if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
				return fmt.Errorf("cluster addslotsrange: %w", err)
			}
		}
		if i > 0 {
			if err := c.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", s.nodes[0].port, s.nodes[0].clusterPort).Err(); err != nil {
				return fmt.Errorf("cluster meet: %w", err)
			}
		}
	}
	for {
		ready := true
		for _, c := range clients {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") ||
				!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(clients))) {
				ready = false
				break
			}
		}
		if ready {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("cluster did not reach cluster_state:ok: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond): // CLUSTER INFO is the only readiness signal
		}
	}
}
