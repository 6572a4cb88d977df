package nemesis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// clusterNodeTimeout is the cluster-node-timeout of LaunchCluster's
// nodes: longer than any pause the suite holds (and than a busy
// machine's stalls), so that only the failover fault moves a master's
// slots, never the Cluster on its own.
const clusterNodeTimeout = 5 * time.Second

// promoteTimeout bounds a failover until the Cluster agrees on it: Redis
// gives up a manual failover after 5 s, and the master then takes writes
// again.
const promoteTimeout = 10 * time.Second

// LaunchCluster starts a Cluster for the robustness suite: three Redis 8
// masters with a replica each (redistest.LaunchClusterWithReplicas), its
// files under dir; Stop ends it. Replicas never take over on their own
// (cluster-replica-no-failover): only the failover fault moves a
// master's slots. Of the faults only pause and failover act on a Cluster,
// so it runs without ServerArgs and without an ACL file; CreateUser
// creates the user on every node, replicas included.
func LaunchCluster(dir string) (*redistest.Server, error) {
	return redistest.LaunchClusterWithReplicas(redistest.Redis8, dir, clusterNodeTimeout, "--cluster-replica-no-failover", "yes")
}

// shard is a Cluster master with its replica, as indexes into Addrs.
type shard struct {
	master, replica int    // replica is -1 when none is connected
	slots           string // the master's slot ranges: "0-5460", or "0-10,20-30"
}

// cluster is the admin clients of every node of a Cluster, in Addrs
// order, for one Run.
type cluster struct {
	addrs   []string
	clients []*redis.Client
}

func newCluster(srv *redistest.Server) *cluster {
	c := &cluster{addrs: srv.Addrs()}
	for _, a := range c.addrs {
		c.clients = append(c.clients, newAdmin(a))
	}
	return c
}

func (c *cluster) close() {
	for _, cl := range c.clients {
		_ = cl.Close()
	}
}

// role is what ROLE says of a node: "master", or "slave" with its
// master's address and its link's state ("connected" once in sync).
type role struct {
	name, master, state string
}

func (c *cluster) role(ctx context.Context, i int) (role, error) {
	v, err := c.clients[i].Do(ctx, "ROLE").Slice()
	if err != nil {
		return role{}, fmt.Errorf("ROLE on %s: %w", c.addrs[i], err)
	}
	if len(v) == 0 {
		return role{}, fmt.Errorf("ROLE on %s: empty reply", c.addrs[i])
	}
	r := role{name: fmt.Sprint(v[0])}
	if r.name == "slave" && len(v) >= 4 {
		r.master = fmt.Sprintf("%v:%v", v[1], v[2])
		r.state = fmt.Sprint(v[3])
	}
	return r, nil
}

// shards returns the Cluster's masters, each with its connected replica
// and its slots as the master itself states them.
func (c *cluster) shards(ctx context.Context) ([]shard, error) {
	var out []shard
	replicaOf := map[string]int{}
	for i := range c.addrs {
		r, err := c.role(ctx, i)
		if err != nil {
			return nil, err
		}
		switch {
		case r.name == "master":
			out = append(out, shard{master: i, replica: -1})
		case r.state == "connected":
			replicaOf[r.master] = i
		}
	}
	for j := range out {
		s := &out[j]
		if i, ok := replicaOf[c.addrs[s.master]]; ok {
			s.replica = i
		}
		nodes, err := c.clients[s.master].ClusterNodes(ctx).Result()
		if err != nil {
			return nil, fmt.Errorf("CLUSTER NODES on %s: %w", c.addrs[s.master], err)
		}
		for _, line := range strings.Split(nodes, "\n") {
			f := strings.Fields(line)
			if len(f) >= 8 && strings.Contains(f[2], "myself") {
				s.slots = strings.Join(f[8:], ",")
			}
		}
	}
	return out, nil
}

// inSync waits until replica has processed every write master had taken
// at some moment, and returns that moment: every write the master
// acknowledged before it is on the replica. It gives up after 2 s.
func (c *cluster) inSync(ctx context.Context, master, replica int) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for {
		at := time.Now()
		m, merr := c.offset(ctx, master, "master_repl_offset")
		r, rerr := c.offset(ctx, replica, "slave_repl_offset")
		if merr == nil && rerr == nil && r >= m {
			return at, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("%s not in sync with %s (offset %d of %d; %v): %w",
				c.addrs[replica], c.addrs[master], r, m, errors.Join(merr, rerr), ctx.Err())
		case <-time.After(time.Millisecond): // offsets give no other signal
		}
	}
}

// offset returns the replication offset field of node i's INFO
// replication.
func (c *cluster) offset(ctx context.Context, i int, field string) (int64, error) {
	fields, err := info(ctx, c.clients[i], "replication")
	if err != nil {
		return 0, err
	}
	v, ok := fields[field]
	if !ok {
		return 0, fmt.Errorf("INFO replication of %s: no %s", c.addrs[i], field)
	}
	return strconv.ParseInt(v, 10, 64)
}

// unsettled says why the Cluster does not yet agree that master serves
// and replica replicates it, or "" once it does: replica's link to master
// is up, and every node is in cluster_state:ok and lists master as a
// master and replica as a replica.
func (c *cluster) unsettled(ctx context.Context, master, replica int) string {
	r, err := c.role(ctx, replica)
	if err != nil || r.name != "slave" || r.master != c.addrs[master] || r.state != "connected" {
		return fmt.Sprintf("ROLE of %s: %+v, %v", c.addrs[replica], r, err)
	}
	for i, cl := range c.clients {
		info, err := cl.ClusterInfo(ctx).Result()
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			return fmt.Sprintf("CLUSTER INFO of %s: not ok (%v)", c.addrs[i], err)
		}
		nodes, err := cl.ClusterNodes(ctx).Result()
		if err != nil {
			return fmt.Sprintf("CLUSTER NODES of %s: %v", c.addrs[i], err)
		}
		want := map[string]string{c.addrs[master]: "master", c.addrs[replica]: "slave"}
		for _, line := range strings.Split(nodes, "\n") {
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			addr, _, _ := strings.Cut(f[1], "@")
			if w, ok := want[addr]; ok {
				flags := "," + f[2] + ","
				if !strings.Contains(flags, ","+w+",") || strings.Contains(flags, ",fail,") || strings.Contains(flags, ",fail?,") {
					return fmt.Sprintf("CLUSTER NODES of %s: %s", c.addrs[i], line)
				}
				delete(want, addr)
			}
		}
		if len(want) > 0 {
			return fmt.Sprintf("CLUSTER NODES of %s: %v missing", c.addrs[i], want)
		}
	}
	return ""
}

// waitSettled polls unsettled every 10 ms until the Cluster agrees or
// ctx ends: a Cluster's agreement gives no other signal.
func (c *cluster) waitSettled(ctx context.Context, master, replica int) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		why := c.unsettled(ctx, master, replica)
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s serving with %s as its replica not agreed (%s): %w", c.addrs[master], c.addrs[replica], why, ctx.Err())
		case <-tick.C:
		}
	}
}

func (r *run) failover(ctx context.Context) error {
	c := newCluster(r.srv)
	defer c.close()
	shards, err := c.shards(ctx)
	if err != nil {
		return fmt.Errorf("nemesis: failover: %w", err)
	}
	takeover := r.o.intN(2) == 1
	var ready []shard
	for _, s := range shards {
		// A replica elected a moment ago cannot be elected again yet
		// (redistest's ClusterFailover says why): it may only take over.
		if s.replica >= 0 && (takeover || r.srv.Electable(s.replica)) {
			ready = append(ready, s)
		}
	}
	if len(ready) == 0 && !takeover {
		takeover = true
		for _, s := range shards {
			if s.replica >= 0 {
				ready = append(ready, s)
			}
		}
	}
	if len(ready) == 0 {
		return errors.New("nemesis: failover: no master has a replica in sync")
	}
	s := ready[r.o.intN(len(ready))]
	mode := "FAILOVER"
	if takeover {
		mode = "TAKEOVER"
	}
	// Start is when the replica had every write the master had
	// acknowledged: a takeover can lose only writes acknowledged later.
	start, err := c.inSync(ctx, s.master, s.replica)
	if err != nil {
		return fmt.Errorf("nemesis: failover: %w", err)
	}
	rctx, cancel := r.restoreCtx(ctx)
	defer cancel()
	r.rec.Start = start
	pctx, pcancel := context.WithTimeout(rctx, promoteTimeout)
	err = r.srv.ClusterFailover(pctx, s.replica, takeover)
	if err == nil {
		err = c.waitSettled(pctx, s.replica, s.master)
	}
	pcancel()
	took := time.Since(r.rec.Start).Round(time.Millisecond)
	if err != nil {
		// A failover Redis gave up, or turned back, leaves the roles as
		// they were.
		if serr := c.waitSettled(rctx, s.master, s.replica); serr != nil {
			return restoreErr(Failover, errors.Join(err, serr))
		}
		r.rec.Detail = fmt.Sprintf("%s: %s did not take over %s's slots %s; given up after %v, roles back after %v", mode,
			c.addrs[s.replica], c.addrs[s.master], s.slots, took, time.Since(r.rec.Start).Round(time.Millisecond))
		return fmt.Errorf("nemesis: failover: %w", err)
	}
	r.rec.Detail = fmt.Sprintf("%s: %s took over %s's slots %s; settled after %v", mode,
		c.addrs[s.replica], c.addrs[s.master], s.slots, took)
	return nil
}

// pauseMaster is pause on a Cluster: it stops one master, chosen with
// Options.Rand.
func (r *run) pauseMaster(ctx context.Context) error {
	c := newCluster(r.srv)
	shards, err := c.shards(ctx)
	c.close()
	if err != nil {
		return fmt.Errorf("nemesis: pause: %w", err)
	}
	if len(shards) == 0 {
		return errors.New("nemesis: pause: no master")
	}
	s := shards[r.o.intN(len(shards))]
	r.rec.Start = time.Now()
	if err := r.srv.PauseNode(s.master); err != nil {
		return fmt.Errorf("nemesis: pause: %w", err)
	}
	cut := hold(ctx, r.d, nil)
	err = r.srv.ResumeNode(s.master)
	r.rec.Detail = fmt.Sprintf("SIGSTOP %s (master of slots %s), SIGCONT after %v", c.addrs[s.master], s.slots,
		time.Since(r.rec.Start).Round(time.Millisecond))
	return errors.Join(cut, restoreErr(Pause, err))
}
