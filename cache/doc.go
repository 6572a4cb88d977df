// Package cache provides a read-through cache on a Redis-protocol server
// shared by many processes, in which an expired or missing value is
// recomputed once, not once per request or once per process.
//
//	c, err := cache.New(rdb, &cache.Options{
//		Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute},
//	})
//	...
//	u, err := cache.GetOrLoad(ctx, c, "user:42", func(ctx context.Context) (User, error) {
//		return db.LoadUser(ctx, 42)
//	})
//
// # Stampede protection
//
// Within a process, concurrent calls for a key share one flight. Across
// processes, the first to find the key missing claims it by writing a
// short-lived lock where the value goes (SET NX PX); it loads, replaces the
// claim with the value (SET ... IFEQ claim) and announces it on the key's
// own pub/sub channel (SPUBLISH in the key's slot where the server has
// sharded pub/sub), to which only processes waiting for the key subscribe
// (Options.Broadcast: one channel per namespace that every process hears).
// The others wait for the announcement (a poll is the safety net) and take
// the value from it. A claim whose owner died
// expires after LockTTL and is taken over; the claim is kept alive while
// the loader runs.
//
// A value past its fresh time but within its stale time (Options.Expiry, see
// ExpiryPolicy) is served at once while one
// process, holding the entry's rebuild lock, refreshes it in the
// background. The refreshed value is written only if the key still holds
// what the refresher read (compared by digest for large values: SET ...
// IFDEQ on Redis >= 8.4, a script elsewhere), so a Delete or Set that
// happens during the load wins. With ExpiryPolicy.EarlyRefresh, hot keys
// are refreshed shortly before they expire (XFetch), so they need not go
// stale at all.
//
// GetOrLoadMany does the same for many keys in a few round trips: one
// MGET (one per slot on a Cluster), the claims in one pipeline, one loader
// call for the keys it claimed, their values and announcements pipelined.
// A Batcher registers a batch loader for one family of keys: the
// background refreshes (and loads) that its Get and GetMany calls start
// in a process within a short window go to that loader together, each
// key still claimed on its own, so that it is loaded once in the fleet.
//
// Options.Backends caps, per backend and across every process, how many
// loads run at once: a load takes one of its backend's permits (a
// lock.Semaphore) once it holds its claim, and fails with ErrBackendBusy
// when none frees up within its WaitTimeout (see WithBackend).
//
// # Failures
//
// A loader error is returned to every caller waiting for that load, in
// every process (ErrRemoteLoad in the others), and never stored as a
// value: beside the key, a short-lived marker (about a second) tells it
// to the waiters of that load that missed its announcement.
// loader.ErrNotFound may be stored for Expiry.Negative. A failed background refresh keeps the stale value
// served until its stale time (Expiry.Stale) ends. A panicking loader becomes a *loader.PanicError for
// every waiter. When the server cannot be reached, loaders run without it
// (each process still loads once per key at a time) and the server is
// left alone for FailOpenCooldown. An entry that cannot be decoded is
// treated as missing and replaced.
//
// # Keys
//
// A key K in namespace NS is stored at NS:{K}, its rebuild lock at
// NS:{K}:lock and a failed rebuild's marker at NS:{K}:fail, in one Redis
// Cluster slot. Keys longer than 128 bytes,
// starting with "#", or containing braces, spaces or non-printable bytes
// are replaced by "#" and the hex SHA-256 of the key inside the braces (a
// cryptographic hash, so that nobody who chooses keys can make two share
// an entry). Every key written has a TTL.
package cache
