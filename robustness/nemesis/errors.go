package nemesis

import "errors"

// ErrUnsupported is returned when the server cannot undergo the fault (a
// Cluster for any fault but pause and failover, a single server for
// failover, miniredis, or a server started without the DEBUG command for
// loading). Nothing was changed.
var ErrUnsupported = errors.New("nemesis: fault not supported by this server")

// ErrNotRestored is returned, joined with the cause, when a fault was
// injected but ending it failed: the server may still be faulty (a
// configuration value, a user's rules) or down, and the run should stop.
var ErrNotRestored = errors.New("nemesis: server not restored")
