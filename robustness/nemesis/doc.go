// Package nemesis injects faults into a running Redis-protocol server for
// the robustness suite: a coordinator process calls Run while worker
// processes send traffic, and records when each fault held.
//
// # Faults
//
//   - busy: a script loops, so other clients get BUSY until SCRIPT KILL.
//   - oom: maxmemory just under the memory in use, with noeviction, so
//     writes get OOM and reads still work.
//   - loading: DEBUG RELOAD slowed down, so clients get LOADING.
//   - pause: SIGSTOP, then SIGCONT: clients time out, then carry on.
//   - pause-kill: SIGSTOP, then SIGKILL and a restart on the same port:
//     clients time out, then lose their connections.
//   - acl: the workers' ACL users lose their write commands (NOPERM).
//   - restart: SIGKILL and a restart on the same port at once.
//   - failover: on a Cluster, a master's replica takes over its slots
//     (CLUSTER FAILOVER, or TAKEOVER, which can lose acknowledged writes).
//
// Every fault leaves the server as it found it: configuration values,
// users' rules and the files it wrote are restored even when the caller's
// context ends midway, and Run reports a restore that failed with
// ErrNotRestored.
//
// # Servers
//
// Faults act on one server process (Redis 7, Redis >= 8.4 or Valkey >= 9
// from redistest); miniredis is not supported. Start it with Launch (or
// with ServerArgs), which turns on what the faults need: the append-only
// file, synced on every write, so that acknowledged writes survive
// pause-kill and restart, and the DEBUG command for loading. On a Cluster
// with a replica per master (LaunchCluster) only pause, which stops one
// master, and failover act; the others return ErrUnsupported.
//
// Usage, in the coordinator:
//
//	srv, err := nemesis.Launch(redistest.Valkey, dir)
//	...
//	err = nemesis.CreateUser(ctx, srv, "worker", pw) // workers log in as it
//	...
//	rec, err := nemesis.Run(ctx, nemesis.Busy, srv, 2*time.Second, nil)
package nemesis
