package nemesis

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// ServerArgs returns the server arguments every fault needs: the
// append-only file, synced on every write, so that what the server
// acknowledged survives pause-kill and restart; and the DEBUG command,
// for loading. Pass them to redistest.LaunchWith or StartWith.
func ServerArgs() []string {
	return []string{"--appendonly", "yes", "--appendfsync", "always", "--enable-debug-command", "yes"}
}

// Launch starts a server of kind (Redis7, Redis8, Valkey or Cluster) for
// the robustness suite, its files under dir; Stop ends it. It runs with
// ServerArgs and an ACL file, dir/users.acl, that CreateUser and the
// faults that restart the server save the users to: the restarted server
// knows them before it takes its first connection, so that the workers'
// logins never fail. A Cluster is LaunchCluster's.
func Launch(kind redistest.Kind, dir string) (*redistest.Server, error) {
	if kind == redistest.Cluster {
		return LaunchCluster(dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	acl := filepath.Join(dir, "users.acl")
	f, err := os.OpenFile(acl, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return redistest.LaunchWith(kind, dir, append(ServerArgs(), "--aclfile", acl)...)
}

// saveUsers writes the ACL users to the server's ACL file, if it has one,
// so that it starts with them after a restart.
func saveUsers(ctx context.Context, c *redis.Client) error {
	cfg, err := configGet(ctx, c, "aclfile")
	if err != nil || cfg["aclfile"] == "" {
		return err
	}
	if err := c.Do(ctx, "ACL", "SAVE").Err(); err != nil {
		return fmt.Errorf("ACL SAVE: %w", err)
	}
	return nil
}

// supported says whether srv is a server that Run can act on with f: one
// process it started, or for pause and failover a Cluster.
func supported(srv *redistest.Server, f Fault) error {
	switch {
	case srv.Kind == redistest.Miniredis:
		return fmt.Errorf("%s: %w", srv.Kind, ErrUnsupported)
	case srv.Kind == redistest.Cluster && f != Pause && f != Failover:
		return fmt.Errorf("%s: %w", srv.Kind, ErrUnsupported)
	case srv.Kind == redistest.Cluster:
		return nil
	case f == Failover:
		return fmt.Errorf("%s is not a Cluster: %w", srv.Kind, ErrUnsupported)
	}
	if n := len(srv.Addrs()); n != 1 {
		return fmt.Errorf("%d processes: %w", n, ErrUnsupported)
	}
	return nil
}

// newAdmin returns a client for addr, as the default user, that never
// retries (a retried command would hide what the server answered) and
// honours its context's deadline.
func newAdmin(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 2, DisableIdentity: true,
		ContextTimeoutEnabled: true, DialTimeout: 2 * time.Second, ReadTimeout: 10 * time.Second})
}

// configGet returns the values of the configuration parameters names.
func configGet(ctx context.Context, c *redis.Client, names ...string) (map[string]string, error) {
	out := make(map[string]string, len(names))
	for _, n := range names {
		m, err := c.ConfigGet(ctx, n).Result()
		if err != nil {
			return nil, fmt.Errorf("CONFIG GET %s: %w", n, err)
		}
		v, ok := m[n]
		if !ok {
			return nil, fmt.Errorf("CONFIG GET %s: no such parameter", n)
		}
		out[n] = v
	}
	return out, nil
}

// configSet sets the parameters kv (name, value, name, value...) at once.
func configSet(ctx context.Context, c *redis.Client, kv ...string) error {
	args := []any{"CONFIG", "SET"}
	for _, s := range kv {
		args = append(args, s)
	}
	if err := c.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("CONFIG SET %s: %w", strings.Join(kv, " "), err)
	}
	return nil
}

// info returns the fields of INFO section.
func info(ctx context.Context, c *redis.Client, section string) (map[string]string, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("INFO %s: %w", section, err)
	}
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":"); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out, nil
}

// keyCount returns how many keys the server holds in all its databases
// (INFO keyspace: "db0:keys=3,expires=0,avg_ttl=0").
func keyCount(ctx context.Context, c *redis.Client) (int, error) {
	ks, err := info(ctx, c, "keyspace")
	if err != nil {
		return 0, err
	}
	n := 0
	for k, v := range ks {
		if !strings.HasPrefix(k, "db") {
			continue
		}
		for _, f := range strings.Split(v, ",") {
			if s, ok := strings.CutPrefix(f, "keys="); ok {
				i, err := strconv.Atoi(s)
				if err != nil {
					return 0, fmt.Errorf("INFO keyspace %s: %q", k, v)
				}
				n += i
			}
		}
	}
	return n, nil
}
