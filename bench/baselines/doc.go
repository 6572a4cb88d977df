// Package baselines holds the approaches the bench compares stampede with,
// written the way services commonly write them:
//
//   - Naive: cache-aside. GET; on a miss, load and SET with a TTL. Every
//     caller that misses loads.
//   - Singleflight: Naive behind golang.org/x/sync/singleflight, which is
//     what most Go caches offer: one load per key per process, but still
//     one per process.
//   - LockPoll: a hand-written distributed lock. On a miss, SET NX PX a
//     lock key; the winner loads and writes, the losers GET again every
//     50 ms until the value appears.
//   - PageCache: an HTTP page cache in process memory with requests
//     coalesced per process, the model of Souin's and Varnish's: a purge
//     drops a page in one process, and each process renders it again once.
//
// Values are msgpack-encoded, as stampede's default codec does, so that the
// approaches pay the same encoding costs (PageCache keeps responses as they
// are, in memory). Every type is safe for
// concurrent use once built; none starts goroutines.
package baselines
