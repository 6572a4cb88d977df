package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hotkv/stampede/internal/toolkit/fleet"
	"github.com/redis/go-redis/v9"
)

// controller drives the fleet. It is used by one goroutine.
type controller struct {
	cfg      config
	srv      *server
	f        *fleet.Fleet
	nodes    []*redis.Client // one per server node, for INFO
	overhead int64           // bytes of one INFO reply set, subtracted from each delta
	ns       int             // namespaces used so far
}

// newController starts the server and max(cfg.procs) workers.
func newController(ctx context.Context, cfg config) (*controller, error) {
	srv, err := startServer(ctx, cfg.cluster)
	if err != nil {
		return nil, err
	}
	ct := &controller{cfg: cfg, srv: srv}
	for _, a := range srv.addrs {
		ct.nodes = append(ct.nodes, redis.NewClient(&redis.Options{Addr: a, PoolSize: 1}))
	}
	n := slices.Max(cfg.procs)
	names := make([]string, n)
	for i := range names {
		names[i] = "w" + strconv.Itoa(i)
	}
	cl := "0"
	if cfg.cluster {
		cl = "1"
	}
	ct.f, err = fleet.Start(ctx, names, func(string) []string {
		return []string{envWorker + "=1", envAddrs + "=" + strings.Join(srv.addrs, ","), envCluster + "=" + cl}
	})
	if err != nil {
		ct.close()
		return nil, err
	}
	// What reading INFO costs in the server's own count: the delta of two
	// reads in a row, the smallest of a few.
	ct.overhead = math.MaxInt64
	for range 5 {
		a, err := info(ctx, ct.nodes)
		if err != nil {
			ct.close()
			return nil, err
		}
		b, err := info(ctx, ct.nodes)
		if err != nil {
			ct.close()
			return nil, err
		}
		ct.overhead = min(ct.overhead, b.netOut-a.netOut)
	}
	return ct, nil
}

func (ct *controller) close() {
	if ct.f != nil {
		ct.f.Close()
	}
	for _, c := range ct.nodes {
		_ = c.Close()
	}
	ct.srv.stop()
}

// ask sends line to the workers ws and returns each one's answer.
func (ct *controller) ask(ctx context.Context, ws []int, line string) (map[int]string, error) {
	for _, w := range ws {
		if err := ct.f.Send(w, line); err != nil {
			return nil, err
		}
	}
	return ct.collect(ctx, len(ws))
}

// collect returns the next n lines by worker; an "error" line fails it.
func (ct *controller) collect(ctx context.Context, n int) (map[int]string, error) {
	out := make(map[int]string, n)
	err := ct.f.Collect(ctx, n, func(w int, line string) error {
		if msg, ok := strings.CutPrefix(line, "error "); ok {
			return fmt.Errorf("%s", msg)
		}
		if _, dup := out[w]; dup {
			return fmt.Errorf("a second line %q", line)
		}
		out[w] = line
		return nil
	})
	return out, err
}

// stats sums the counts of workers ws and returns the largest message
// count of one.
func (ct *controller) stats(ctx context.Context, ws []int) (counts, map[int]counts, error) {
	lines, err := ct.ask(ctx, ws, "stats")
	if err != nil {
		return counts{}, nil, err
	}
	var sum counts
	per := map[int]counts{}
	for w, line := range lines {
		var c counts
		b, ok := strings.CutPrefix(line, "stats ")
		if !ok {
			return sum, nil, fmt.Errorf("worker %d said %q, want stats", w, line)
		}
		if err := json.Unmarshal([]byte(b), &c); err != nil {
			return sum, nil, err
		}
		per[w] = c
		sum = sum.add(c)
	}
	return sum, per, nil
}

// quiesce waits until what the workers have read stops changing (late
// deliveries to idle processes), up to 3 s, and returns the counts.
func (ct *controller) quiesce(ctx context.Context, ws []int) (counts, map[int]counts, error) {
	last, per, err := ct.stats(ctx, ws)
	for deadline := time.Now().Add(3 * time.Second); err == nil && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond) // nothing signals that no message is on its way
		var now counts
		var p map[int]counts
		if now, p, err = ct.stats(ctx, ws); err == nil && now == last {
			return now, p, nil
		}
		last, per = now, p
	}
	return last, per, err
}

// measure runs fn between two readings of the server and the workers
// and fills p's counts from their difference.
func (ct *controller) measure(ctx context.Context, p *point, ws []int, fn func() error) error {
	before, perBefore, err := ct.quiesce(ctx, ws)
	if err != nil {
		return err
	}
	// CLUSTER INFO before INFO and after it at the end, so that its
	// replies fall outside the bytes counted.
	b0, err := ct.bus(ctx)
	if err != nil {
		return err
	}
	i0, err := info(ctx, ct.nodes)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := fn(); err != nil {
		return err
	}
	if p.Elapsed == 0 {
		p.Elapsed = time.Since(start)
	}
	after, perAfter, err := ct.quiesce(ctx, ws)
	if err != nil {
		return err
	}
	i1, err := info(ctx, ct.nodes)
	if err != nil {
		return err
	}
	b1, err := ct.bus(ctx)
	if err != nil {
		return err
	}
	p.Delta = after.sub(before)
	p.ServerBytes = i1.netOut - i0.netOut - ct.overhead
	p.CPU = i1.cpu - i0.cpu
	p.BusPublish = b1 - b0
	for w, a := range perAfter {
		d := a.sub(perBefore[w])
		p.MaxProcMsgs = max(p.MaxProcMsgs, d.Messages+d.SMessages)
	}
	return nil
}

// bus returns the PUBLISH and SPUBLISH messages the Cluster's nodes have
// sent each other (0 on a single server).
func (ct *controller) bus(ctx context.Context) (int64, error) {
	if !ct.cfg.cluster {
		return 0, nil
	}
	var n int64
	for _, c := range ct.nodes {
		txt, err := c.ClusterInfo(ctx).Result()
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(txt, "\r\n") {
			k, v, _ := strings.Cut(line, ":")
			if k == "cluster_stats_messages_publish_sent" || k == "cluster_stats_messages_publishshard_sent" {
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			}
		}
	}
	return n, nil
}
