package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// User is an ACL user made for one test by (*Server).User.
type User struct {
	Name, Password string
	s              *Server
}

// User creates an ACL user on every process of s holding exactly rules
// (ACL SETUSER syntax after "reset on >password", e.g. "~ns:*",
// "&ns:announce", "+get"), and deletes it in tb.Cleanup. Its name is
// unique to the test, so tests can share a server. Miniredis has no ACL:
// tb is skipped.
func (s *Server) User(tb testing.TB, rules ...string) *User {
	tb.Helper()
	if s.Kind == Miniredis {
		tb.Skip("redistest: miniredis has no ACL")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	u := &User{Name: "u" + hex.EncodeToString(b[:]), Password: "p" + hex.EncodeToString(b[:]), s: s}
	if err := u.Set(rules...); err != nil {
		tb.Fatalf("redistest: ACL SETUSER %s: %v", strings.Join(rules, " "), err)
	}
	tb.Cleanup(func() { _ = u.each("DELUSER", u.Name) })
	return u
}

// Set replaces the user's rules with rules (as User takes them), on every
// process of the server. Clients logged in as the user keep their
// connections; the server applies the new rules to their next command.
func (u *User) Set(rules ...string) error {
	args := []any{"SETUSER", u.Name, "reset", "on", ">" + u.Password}
	for _, r := range rules {
		args = append(args, r)
	}
	return u.each(args...)
}

// each runs ACL args on every process of the server, as the default user.
func (u *User) each(args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, addr := range u.s.Addrs() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		err := c.Do(ctx, append([]any{"ACL"}, args...)...).Err()
		_ = c.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// Client returns a new client logged in as the user (a ClusterClient for
// a cluster), closed in tb.Cleanup.
func (u *User) Client(tb testing.TB) redis.UniversalClient {
	tb.Helper()
	var c redis.UniversalClient
	if u.s.Kind == Cluster {
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: u.s.Addrs(), Username: u.Name, Password: u.Password})
	} else {
		c = redis.NewClient(&redis.Options{Addr: u.s.Addrs()[0], Username: u.Name, Password: u.Password})
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// The permissions below are those of docs/permissions.md, which the ACL
// tests grant and nothing more; GetOrLoadMany's +mget is added by its own
// test. Keep them in step.

// ConnPerms are what a go-redis client needs to connect (HELLO; CLUSTER
// SLOTS to find a cluster's nodes), whatever it is used for.
func ConnPerms(kind Kind) []string {
	p := []string{"+hello"}
	if kind == Cluster {
		p = append(p, "+cluster|slots")
	}
	return p
}

// LockPerms are what package lock needs on kind for locks on keys matching
// keyPattern (Obtain, Refresh, Release, TTL, Inspect; no fencing).
func LockPerms(kind Kind, keyPattern string) []string {
	p := append(ConnPerms(kind), "~"+keyPattern, "+set", "+get", "+pttl")
	switch kind {
	case Redis8, Cluster:
		p = append(p, "+delex", "+digest")
	case Valkey:
		p = append(p, "+delifeq")
	case Redis7:
		p = append(p, "+evalsha", "+eval", "+del", "+pexpire")
	}
	return p
}

// CachePerms are what package cache (and the middleware on it) needs on
// kind for the namespace ns: keys ns:*, the channels ns:* (each key's
// announcement channel, ns:{K}:ann, with sharded pub/sub, which every kind
// here has). cache.Options.Broadcast needs CacheBroadcastPerms instead of
// the pub/sub commands here.
func CachePerms(kind Kind, ns string) []string {
	p := append(ConnPerms(kind), "~"+ns+":*", "&"+ns+":*",
		"+get", "+set", "+del", "+spublish", "+ssubscribe", "+sunsubscribe", "+ping")
	switch kind {
	case Redis8, Cluster:
		p = append(p, "+delex", "+digest")
	case Valkey:
		// Conditional writes over values above DigestThreshold (stale
		// refreshes) compare a SHA-1 in a script: Valkey has no IFDEQ.
		p = append(p, "+delifeq", "+evalsha", "+eval")
	case Redis7:
		p = append(p, "+evalsha", "+eval", "+pexpire")
	}
	return p
}

// CacheBroadcastPerms are the pub/sub commands of cache.Options.Broadcast
// (one channel, ns:announce, covered by CachePerms' channel rule), in
// place of CachePerms' +spublish +ssubscribe +sunsubscribe.
func CacheBroadcastPerms() []string { return []string{"+publish", "+subscribe"} }

// NearPerms are what cache.Options.Near adds to CachePerms on every kind:
// the tracking connection asks its own id, turns tracking on, and
// subscribes to the invalidation channel; a read that fills the near cache
// asks the key's expiry too.
func NearPerms() []string {
	return []string{"+pttl", "+client|id", "+client|tracking", "+subscribe", "&__redis__:invalidate"}
}

// FencePerms are what lock.WithFencing adds to LockPerms on every
// kind: the fence keys ("{key}:fence" for a key without a hash tag) and
// the script that draws the number.
func FencePerms(keyPattern string) []string {
	return []string{"~{" + keyPattern, "+evalsha", "+eval", "+get", "+set", "+time"}
}

// HandoffPerms are what a lock obtained with a Retry adds to LockPerms on
// every kind, for keys matching keyPattern, so that its release hands it
// to a queued waiter and wakes it: the hand-off script and the commands it
// calls, the queue keys ("{key}:queue", "{key}:queue:entries" for a key
// without a hash tag) and the channel "{key}:handoff" that waiters
// subscribe to (sharded pub/sub where the server has it, SPUBLISH and
// SSUBSCRIBE; classic elsewhere). Without them locks work as before,
// waiters polling.
func HandoffPerms(keyPattern string) []string {
	return []string{"~{" + keyPattern, "&{" + keyPattern,
		"+evalsha", "+eval", "+get", "+set", "+del", "+exists", "+pexpire", "+pttl", "+time",
		"+zadd", "+zrem", "+zrange", "+hset", "+hget", "+hdel",
		"+spublish", "+ssubscribe", "+sunsubscribe", "+publish", "+subscribe", "+unsubscribe", "+ping"}
}

// SemaphorePerms are what a lock.Semaphore on keys matching keyPattern
// (without a hash tag) needs on every kind, the connection's aside: the
// key itself, the release channel "{key}:released" that waiters subscribe
// to (sharded pub/sub: every kind here has it), and the semaphore script
// and the commands it calls. docs/permissions.md lists the same.
func SemaphorePerms(keyPattern string) []string {
	return []string{"~" + keyPattern, "&{" + keyPattern,
		"+evalsha", "+eval", "+time", "+zremrangebyscore", "+zcard", "+zadd", "+zrange", "+zscore", "+zrem",
		"+pttl", "+pexpire", "+spublish", "+ssubscribe", "+sunsubscribe", "+ping"}
}

// CacheBackendPerms are what cache.Options.Backends adds to CachePerms on
// every kind: the semaphore script and the commands it calls (its key and
// channel are within the namespace's).
func CacheBackendPerms() []string {
	return []string{"+evalsha", "+eval", "+time", "+zremrangebyscore", "+zcard", "+zadd", "+zrange", "+zscore", "+zrem", "+pttl", "+pexpire"}
}
