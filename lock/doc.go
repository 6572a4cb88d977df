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
//	})
//	if errors.Is(err, lock.ErrNotObtained) {
//		// another instance is building it
//	}
//
// # Per-call options
//
// Obtain takes ObtainOptions, Do DoOptions and RunOnce RunOnceOptions.
// Each constructor returns an option of exactly the calls it applies to,
// so that one given to a call it does not apply to does not compile:
//
//	WithRetry, WithMaxWait      WaitOption     Obtain, Do
//	WithMetadata, WithFencing   Option         Obtain, Do, RunOnce
//	WithRefreshEvery            DoOption       Do
//	WithMinHold                 RunOnceOption  RunOnce
//
// c.RunOnce(ctx, key, maxHold, fn, lock.WithRetry(r)), for one, is a
// compile error (WaitOption does not implement RunOnceOption), and so is
// c.Obtain(ctx, key, ttl, lock.WithMinHold(d)). A nil option is skipped,
// so Obtain(ctx, key, ttl, nil) means all defaults. An option keeps no
// state of its own: one value may be given to many calls, also
// concurrently. Options kept for several calls are kept one by one (fence
// := lock.WithFencing()) or in a slice per call ([]lock.DoOption), since a
// slice is passed (opts...) only as a slice of the call's own option type.
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
// proxy, a cluster in the middle of an upgrade) downgrades the strategy and
// the operation is retried; the server is asked again a minute later.
// Only a definite refusal (an unknown command, the ACL) is remembered: a
// BUSY, OOM or other passing reply fails the one call. Capabilities shows
// what is in use.
//
// # Waiting: hand-off and wake-up
//
// An Obtain with WithRetry that finds the lock held joins a
// queue kept next to the lock (the keys {key}:queue and
// {key}:queue:entries, in the lock's cluster slot; key:queue... for a key
// with a hash tag) and subscribes, on a pub/sub connection of the Client
// (opened by the first waiter, closed about ten seconds after the last),
// to the lock's channel ({key}:handoff). A lock obtained with a Retry is released by a script
// that, in the same round trip, hands the lock to the first live waiter in
// the queue (the key is set to that waiter's value, so a newcomer's SET NX
// fails meanwhile; with fencing, a number is drawn for the waiter) and
// publishes the waiter's token; nothing is published when nobody waits or
// nothing was released. The woken waiter extends the lock to its own TTL
// with one more round trip and returns (EventWoken). Waiters get the lock
// in the order they queued, and a waiter that has waited through one
// hand-off is not overtaken by a newcomer.
//
// The poll paced by the Retry strategy stays as the safety net: a queued
// waiter polls with a plain GET and, a little less often, refreshes its
// queue entry. A poll finds a lock handed to it whose notification was lost
// or late (EventWakeMissed), so a lost notification costs at most one
// back-off step; a poll that finds the lock free (expired, or released
// without hand-off) hands it to the first live waiter. An entry lives a
// little over two back-off steps past its waiter's last refresh (2×step +
// 100ms), and a lock handed to a waiter that has died is held only until
// its entry would have expired, not for the waiter's TTL. A waiter that
// gives up (ctx, MaxWait, a limited Retry) leaves the queue and releases a
// lock handed to it meanwhile, handing it on.
//
// Limits: a lock obtained without a Retry (a single attempt, RunOnce,
// package cache's rebuild locks) is released the plain way; waiters queued
// for it find it by their poll, in queue order, but a newcomer's SET NX may
// take it first. So may a newcomer after a lock expired. Hand-off needs
// scripts (EVALSHA) and the commands listed in docs/permissions.md;
// where the server refuses them, waiters poll and the Client
// warns once (Options.Logger). Without the channel, hand-offs still happen
// and waiters find them by their poll, with a warning.
//
// Where the server has sharded pub/sub (Redis and Valkey >= 7), hand-offs
// are published with SPUBLISH and waiters subscribe with SSUBSCRIBE; on a
// Redis Cluster the channel lies in the lock's slot, so a message stays on
// the shard that owns the lock instead of being broadcast to every node,
// and a Client keeps one pub/sub connection per master it waits on. While
// a slot migrates, its waiters may miss notifications and go by their
// poll. Elsewhere PUBLISH and SUBSCRIBE, one connection per Client.
//
// # Semaphores
//
// Client.Semaphore caps how many holders, in every process, hold one of its
// N permits at once: Acquire waits for one (woken by a release's notice on
// the semaphore's channel, else at the earliest expiry or the poll),
// TryAcquire takes one or returns ErrNotObtained. A Permit expires after
// its TTL unless refreshed (Permit.KeepAlive, as Lock.KeepAlive), so a
// killed holder frees its place then. Waiters are not served in order. The
// semaphore is one key, a sorted set scored by the server's clock, and
// needs scripting on every server.
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
// WithFencing every acquisition gets a number larger than all
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
