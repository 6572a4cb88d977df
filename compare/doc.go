// Package compare holds tests that measure a few behaviours of stampede
// next to libraries in common use (go-redis/cache, bsm/redislock, redsync,
// sturdyc) on a real Redis 8.6 started by the test bed. It has no code of
// its own; see README.md for the measured table.
package compare
