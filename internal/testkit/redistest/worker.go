package redistest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

const (
	envRole    = "STAMPEDE_TEST_WORKER"
	envAddrs   = "STAMPEDE_TEST_ADDRS"
	envCluster = "STAMPEDE_TEST_CLUSTER"
)

// Key returns a key unique to tb, so tests can share a server.
func Key(tb testing.TB, name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "test:" + tb.Name() + ":" + hex.EncodeToString(b[:]) + ":" + name
}

// Proc is a worker process: the test binary re-executed to run one worker
// function from the map given to Main.
type Proc struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan struct{}
	err  error

	mu    sync.Mutex
	lines chan string // stdout lines, as they come
}

// Spawn starts a worker process running role, connected to s, with extra
// environment variables env ("K=V"). It is killed in tb.Cleanup if it is
// still running then.
func Spawn(tb testing.TB, s *Server, role string, env ...string) *Proc {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envRole+"="+role, envAddrs+"="+strings.Join(s.Addrs(), ","),
		fmt.Sprintf("%s=%t", envCluster, s.Kind == Cluster))
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{}), lines: make(chan string, 1024)}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("redistest: spawn worker %s: %v", role, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.out.WriteString(line + "\n")
			p.mu.Unlock()
			select {
			case p.lines <- line:
			default: // nobody reads lines; Output still has them
			}
		}
		p.err = cmd.Wait()
		close(p.lines)
		close(p.done)
	}()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// Lines returns the worker's stdout lines as they are printed; the channel
// closes when the process exits.
func (p *Proc) Lines() <-chan string { return p.lines }

// Wait waits for the process to exit or ctx to end, and returns its whole
// stdout.
func (p *Proc) Wait(ctx context.Context) (string, error) {
	select {
	case <-p.done:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String(), p.err
}

// Kill kills the process with SIGKILL and waits for it to exit.
func (p *Proc) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// WorkerClient returns a client for the server the worker was spawned for.
func WorkerClient() redis.UniversalClient {
	return NewClient(os.Getenv(envCluster) == "true", strings.Split(os.Getenv(envAddrs), ","))
}
