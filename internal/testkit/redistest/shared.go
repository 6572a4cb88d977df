package redistest

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"
)

// shared holds the servers that Shared started, one per kind, for the
// life of the test binary. Main stops them.
var shared struct {
	mu      sync.Mutex
	servers map[Kind]*Server
	errs    map[Kind]error
	dir     string
}

// Shared returns a server of the given kind shared by all tests of the
// test binary, starting it on first use. Tests sharing a server must use
// distinct keys (see Key). It skips or fails tb as Start does.
func Shared(tb testing.TB, kind Kind) *Server {
	tb.Helper()
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if s := shared.servers[kind]; s != nil {
		return s
	}
	if err := shared.errs[kind]; err != nil {
		missing(tb, err)
	}
	if shared.servers == nil {
		shared.servers, shared.errs = map[Kind]*Server{}, map[Kind]error{}
	}
	if shared.dir == "" {
		d, err := os.MkdirTemp("", "redistest-")
		if err != nil {
			tb.Fatal(err)
		}
		shared.dir = d
	}
	s, err := start(kind, shared.dir+"/"+string(kind))
	if err != nil {
		shared.errs[kind] = err
		missing(tb, err)
	}
	shared.servers[kind] = s
	return s
}

// ForEach runs fn as a subtest on a shared server of every kind given, or
// of every kind when none is given.
func ForEach(t *testing.T, fn func(t *testing.T, s *Server), kinds ...Kind) {
	t.Helper()
	if len(kinds) == 0 {
		kinds = Kinds()
	}
	for _, k := range kinds {
		t.Run(string(k), func(t *testing.T) { fn(t, Shared(t, k)) })
	}
}

// Main is TestMain for packages that use this one. In a worker process
// (see Spawn) it runs the named worker function and exits with its code.
// Otherwise it runs the tests, stops the shared servers and then fails the
// run if any goroutine was leaked.
func Main(m *testing.M, workers map[string]func() int) {
	if role := os.Getenv(envRole); role != "" {
		fn, ok := workers[role]
		if !ok {
			fmt.Fprintf(os.Stderr, "redistest: no worker %q\n", role)
			os.Exit(2)
		}
		os.Exit(fn())
	}
	code := m.Run()
	shared.mu.Lock()
	for _, s := range shared.servers {
		s.Stop()
	}
	if shared.dir != "" {
		_ = os.RemoveAll(shared.dir)
	}
	shared.mu.Unlock()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
