package redisx_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// TestIsRefusal classifies the replies real servers give: only a definite
// refusal (the ACL, a command or form the server lacks, scripting off)
// may be remembered; BUSY, OOM, a failover's replies, errors raised inside
// a script, timeouts and connection errors are facts about the moment.
func TestIsRefusal(t *testing.T) {
	redistest.ForEach(t, testIsRefusal, redistest.Redis7, redistest.Redis8, redistest.Valkey)
}

func testIsRefusal(t *testing.T, s *redistest.Server) {
	ctx := context.Background()
	s = redistest.Start(t, s.Kind) // made busy, full and a replica below: not shared
	rc := s.Client(t)
	key := redistest.Key(t, "k")
	if err := rc.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	user := s.User(t, append(redistest.ConnPerms(s.Kind), "~*", "+eval", "+evalsha", "+set")...).Client(t)
	reply := func(c redis.UniversalClient, args ...any) error { return c.Do(ctx, args...).Err() }
	// An error reply with exactly this text, for replies a single server
	// cannot be brought to give here (a Cluster's, a loading server's).
	verbatim := func(msg string) error {
		return rc.Eval(ctx, "return redis.error_reply(ARGV[1])", nil, msg).Err()
	}

	type tc struct {
		name string
		err  error
		want bool
	}
	tests := []tc{
		{"NOPERM command", reply(user, "GET", key), true},
		{"ACL failure inside a script", user.Eval(ctx, "return redis.call('get', KEYS[1])", []string{key}).Err(), true},
		{"unknown command", reply(rc, "NOSUCHCOMMAND"), true},
		{"unknown subcommand", reply(rc, "CLIENT", "NOSUCH"), true},
		{"unknown option", reply(rc, "SET", key, "v", "NOSUCHOPTION"), true},
		{"wrong arity", reply(rc, "GET"), true},
		{"unknown command inside a script", rc.Eval(ctx, "return redis.call('nosuchcommand')", nil).Err(), true},
		{"scripting disabled (as proxies word it)", verbatim("ERR scripting is disabled"), true},

		{"error raised by a script", rc.Eval(ctx, "return redis.call('incr', KEYS[1])", []string{key}).Err(), false},
		{"script's own error", rc.Eval(ctx, "error('boom')", nil).Err(), false},
		{"NOSCRIPT", reply(rc, "EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", 0), false},
		{"WRONGTYPE", reply(rc, "LPUSH", key, "x"), false},
		{"LOADING", verbatim("LOADING Redis is loading the dataset in memory"), false},
		{"CLUSTERDOWN", verbatim("CLUSTERDOWN The cluster is down"), false},
		{"TRYAGAIN", verbatim("TRYAGAIN Multiple keys request during rehashing of slot"), false},
		{"nil", redisx.IsNilErrForTest(), false},
		{"no error", nil, false},
	}

	// BUSY, while a script runs long; a script killed meanwhile.
	stop := redistest.Busy(t, s.Addrs()[0])
	tests = append(tests, tc{"BUSY", reply(rc, "GET", key), false})
	stop()

	// OOM under maxmemory with noeviction, directly and inside a script.
	if err := rc.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	tests = append(tests,
		tc{"OOM", reply(rc, "SET", key+"2", "v"), false},
		tc{"OOM inside a script", rc.Eval(ctx, "return redis.call('set', KEYS[1], 'v')", []string{key + "2"}).Err(), false})
	if err := rc.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}

	// A replica of a master that is not there: READONLY, then MASTERDOWN.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	_ = ln.Close()
	if err := reply(rc, "REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	tests = append(tests, tc{"READONLY", reply(rc, "SET", key, "v"), false})
	if err := rc.ConfigSet(ctx, "replica-serve-stale-data", "no").Err(); err != nil {
		t.Fatal(err)
	}
	tests = append(tests, tc{"MASTERDOWN", reply(rc, "GET", key), false})
	_ = rc.ConfigSet(ctx, "replica-serve-stale-data", "yes").Err()
	_ = reply(rc, "REPLICAOF", "NO", "ONE")

	// Transport: a timeout, a refused connection.
	slow := redis.NewClient(&redis.Options{Addr: s.Addrs()[0], ReadTimeout: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = slow.Close() })
	gone := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: -1})
	t.Cleanup(func() { _ = gone.Close() })
	tests = append(tests,
		tc{"timeout", slow.Do(ctx, "BLPOP", key+"3", 1).Err(), false},
		tc{"connection refused", gone.Ping(ctx).Err(), false},
		tc{"wrapped refusal", fmt.Errorf("lock: %w", reply(rc, "NOSUCHCOMMAND")), true},
		tc{"not a reply", errors.New("NOPERM looks like one"), false},
	)

	for _, tt := range tests {
		if tt.err == nil && tt.name != "no error" {
			t.Errorf("%s: the server answered no error", tt.name)
			continue
		}
		if got := redisx.IsRefusal(tt.err); got != tt.want {
			t.Errorf("%s: IsRefusal(%v) = %t, want %t", tt.name, tt.err, got, tt.want)
		}
	}
}
