// Package redisx holds the Redis helpers shared by the lock and cache
// packages: the narrow client interface they accept, the probe that learns
// once per client which conditional commands the server offers, the
// compare-and-act operations built on them (with their Lua fallbacks), key
// layout for Redis Cluster, and value digests.
//
// # Why probing executes the commands
//
// A server's version says little: Valkey 9 reports redis_version 7.2.4 in
// INFO, proxies and managed services hide or rename commands, and COMMAND
// lists a command without telling whether a proxy in front lets it through
// or which arguments (IFEQ, IFDEQ) it takes. So the probe runs each
// conditional command once, in one pipeline, against a key that does not
// exist, where every form is a harmless no-op, and keeps what answered.
// HELLO supplies the server name and version for display only.
//
// A command refused later at run time ("ERR unknown command", or a syntax
// error for an unknown argument; for example behind a proxy or in a cluster
// half way through an upgrade) downgrades that operation and the operation
// is retried with the fallback, so the caller never sees the refusal.
//
// # What is remembered, and for how long
//
// Only a definite refusal (IsRefusal: the ACL, a command or form the
// server lacks, scripting off) may be remembered; BUSY, OOM, LOADING, a
// failover's replies, errors raised inside a script, timeouts and broken
// connections fail the one call (a probe that meets one is not kept). And
// what is remembered is learnt again every Recheck (a minute): the probe
// runs again, so an operator who grants a command sees the faster path
// come back without a restart.
package redisx
