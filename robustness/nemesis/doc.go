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
//
// Every fault leaves the server as it found it: configuration values,
// users' rules and the files it wrote are restored even when the caller's
// context ends midway, and Run reports a restore that failed with
// ErrNotRestored.
//
// # Servers
//
// Faults act on one server process (Redis 7, Redis >= 8.4 or Valkey >= 9
// from redistest); clusters and miniredis are not supported. Start it with
// Launch (or with ServerArgs), which turns on what the faults need: the
// append-only file, synced on every write, so that acknowledged writes
// survive pause-kill and restart, and the DEBUG command for loading.
//
// Usage, in the coordinator:
//
//	srv, err := nemesis.Launch(redistest.Valkey, dir)
//	...
//	err = nemesis.CreateUser(ctx, srv, "worker", pw) // workers log in as it
//	...
//	rec, err := nemesis.Run(ctx, nemesis.Busy, srv, 2*time.Second, nil)
package nemesis
