// Package lock provides distributed locks on a Redis-protocol server
// (Redis, Valkey, Dragonfly, a managed Redis or a Redis Cluster) that
// expire on their own, are released and extended only by their owner, can
// be kept alive while long work runs, hand out fencing numbers, and run a
// scheduled job on exactly one instance.
//
// # Usage
//
//	c, err := lock.New(rdb, nil)
//	...
//	err = c.Do(ctx, "report:daily", 30*time.Second, func(ctx context.Context) error {
//		return buildReport(ctx) // ctx is cancelled if the lock is lost
//	}, nil)
//	if errors.Is(err, lock.ErrNotObtained) {
//		// another instance is building it
//	}
//
// # Commands
//
// Obtain is one SET key value NX PX ttl. The value is a 128-bit random
// token, the time it was obtained and optional metadata. Release, Refresh
// and TTL act only if the key still holds that exact value, using the best
// command the server has, learnt once per Client:
//
//	release  DELEX key IFEQ value    Redis >= 8.4, Valkey >= 9.2, Dragonfly
//	         DELIFEQ key value       Valkey 9.0, 9.1
//	         Lua compare-and-delete  everything else
//	extend   SET key value IFEQ value PX ttl   Redis >= 8.4, Valkey >= 8.1
//	         Lua compare-and-pexpire           everything else
//
// Values longer than Options.DigestThreshold are compared by digest
// instead of being sent back: DELEX key IFDEQ xxh3 on Redis >= 8.4, a script
// comparing SHA-1s elsewhere. A command the server refuses at run time (a
// proxy, a cluster in the middle of an upgrade) downgrades the strategy for
// good and the operation is retried; Capabilities shows what is in use.
//
// # Guarantees and their limits
//
// While the lock has not expired, no other Client can obtain it, and no
// Client but its owner can release or extend it: a holder whose lock
// expired gets ErrNotHeld and never deletes the next owner's lock.
//
// An expiring lock cannot stop a holder that is paused (a long GC pause, a
// stopped VM, a slow network) from going on after its lock expired and
// someone else obtained it. Do narrows that window: it refreshes the lock
// while the work runs and cancels the work's context, with cause ErrLost,
// as soon as the lock is lost or could not be refreshed before it would
// expire. It cannot close it: the work must notice the cancellation.
// Fencing closes it where the protected resource can help: with
// ObtainOptions.Fencing every acquisition gets a number larger than all
// earlier ones for that key, taken in the same atomic step as the lock, so
// a store that rejects writes carrying a number below the largest it has
// seen turns away a holder that woke up too late.
//
// The lock lives on one server (or one cluster shard, with its replica).
// A failover to a replica that had not yet received the lock can let a
// second holder in; use fencing where that matters. Fencing numbers come
// from the server's clock when the counter is lost or behind, so they keep
// growing across such a failover as long as the replica's clock is not
// behind its old master's (see Lock.Fence).
package lock
