// Package redistest starts real Redis-protocol servers for tests: Redis 7
// (Debian bookworm's redis-server), Redis >= 8.4 and Valkey >= 9 (built by
// scripts/provision.sh), a 3-master Redis Cluster on Redis >= 8.4, and
// miniredis in-process. Each listens on a free loopback port and is stopped
// by PID when the test (or, for shared servers, the test binary) ends.
//
// A server whose binary is missing skips the test with a message naming the
// binary and the script that provides it; with CI=true it fails the test
// instead, so CI always runs everything.
//
// It also re-executes the test binary as worker processes, because the
// decisive tests of a distributed lock or cache need separate processes,
// the way separate pods are.
package redistest
