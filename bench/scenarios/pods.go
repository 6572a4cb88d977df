package scenarios

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

const (
	envPod  = "STAMPEDE_BENCH_POD"  // "1" in a pod
	envURL  = "STAMPEDE_BENCH_URL"  // the server's URL, for pods
	envPool = "STAMPEDE_BENCH_POOL" // connection pool size per pod
)

// IsPod reports whether this process was started as a pod.
func IsPod() bool { return os.Getenv(envPod) == "1" }

// Pods is a set of worker processes. It is used by one goroutine at a
// time. Use NewPods to create one and Close to stop them.
type Pods struct {
	exe, url string
	list     []*pod
}

// pod is the parent's side of one worker process.
type pod struct {
	id    int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string   // stdout lines; closed when stdout ends
	quit  chan struct{} // closed by Close: stop delivering lines
	done  chan struct{} // closed once the process has been waited for
	err   error         // from cmd.Wait; read after done
	tail  *tailBuffer   // the end of stderr
}

// NewPods returns an empty set of pods that will run exe (the bench
// binary, or a test binary whose TestMain calls PodMain) against the
// server at url.
func NewPods(exe, url string) *Pods { return &Pods{exe: exe, url: url} }

// Len returns how many pods are running.
func (ps *Pods) Len() int { return len(ps.list) }

// Ensure starts pods until there are at least n.
func (ps *Pods) Ensure(n int) error {
	for len(ps.list) < n {
		p, err := ps.start(len(ps.list))
		if err != nil {
			return err
		}
		ps.list = append(ps.list, p)
	}
	return nil
}

func (ps *Pods) start(id int) (*pod, error) {
	cmd := exec.Command(ps.exe)
	cmd.Env = append(os.Environ(), envPod+"=1", envURL+"="+ps.url, fmt.Sprintf("%s=%d", envPool, 64))
	p := &pod{id: id, cmd: cmd, lines: make(chan string), quit: make(chan struct{}), done: make(chan struct{}),
		tail: &tailBuffer{max: 8 << 10}}
	cmd.Stderr = p.tail
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pod: %w", err)
	}
	// Owner: p; stops when the process's stdout ends (it exits, or Close
	// kills it) or Close says quit.
	go func() {
		defer close(p.done)
		defer func() { p.err = cmd.Wait() }() // after the last read, as exec requires
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 512<<20)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			case <-p.quit:
				_, _ = io.Copy(io.Discard, stdout)
				return
			}
		}
	}()
	return p, nil
}

// failure describes why pod p stopped answering.
func (p *pod) failure(what string) error {
	select {
	case <-p.done:
		return fmt.Errorf("pod %d exited %s (%v): %s", p.id, what, p.err, strings.TrimSpace(p.tail.String()))
	case <-time.After(time.Second):
		return fmt.Errorf("pod %d closed its output %s: %s", p.id, what, strings.TrimSpace(p.tail.String()))
	}
}

// next returns the pod's next line, waiting until ctx ends.
func (p *pod) next(ctx context.Context, what string) (string, error) {
	select {
	case line, ok := <-p.lines:
		if !ok {
			return "", p.failure(what)
		}
		if msg, isErr := strings.CutPrefix(line, "error "); isErr {
			return "", fmt.Errorf("pod %d: %s", p.id, msg)
		}
		return line, nil
	case <-ctx.Done():
		return "", fmt.Errorf("pod %d %s: %w", p.id, what, ctx.Err())
	}
}

// Run gives jobs[i] to pod i, waits until every pod is ready, starts them
// all at one instant and collects their results. It returns the start
// instant, to which the results' times are relative. limit bounds the
// whole exchange.
func (ps *Pods) Run(ctx context.Context, jobs []job, limit time.Duration) ([]podResult, time.Time, error) {
	if err := ps.Ensure(len(jobs)); err != nil {
		return nil, time.Time{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for i, j := range jobs {
		j.Pod = i
		b, err := json.Marshal(j)
		if err != nil {
			return nil, time.Time{}, err
		}
		if _, err := ps.list[i].stdin.Write(append(b, '\n')); err != nil {
			return nil, time.Time{}, ps.list[i].failure("before its job")
		}
	}
	for i := range jobs {
		line, err := ps.list[i].next(ctx, "while getting ready")
		if err != nil {
			return nil, time.Time{}, err
		}
		if line != "ready" {
			return nil, time.Time{}, fmt.Errorf("pod %d said %q, want ready", i, line)
		}
	}
	// A little ahead, so that every pod has its "go" before the instant.
	start := time.Now().Add(20 * time.Millisecond)
	for i := range jobs {
		if _, err := fmt.Fprintf(ps.list[i].stdin, "go %d\n", start.UnixNano()); err != nil {
			return nil, time.Time{}, ps.list[i].failure("before go")
		}
	}
	out := make([]podResult, len(jobs))
	for i := range jobs {
		line, err := ps.list[i].next(ctx, "while running")
		if err != nil {
			return nil, time.Time{}, err
		}
		b, ok := strings.CutPrefix(line, "result ")
		if !ok {
			return nil, time.Time{}, fmt.Errorf("pod %d said %.100q, want a result", i, line)
		}
		if err := json.Unmarshal([]byte(b), &out[i]); err != nil {
			return nil, time.Time{}, fmt.Errorf("pod %d result: %w", i, err)
		}
	}
	return out, start, nil
}

// Close ends every pod: it closes their input, so that they exit once
// their job is done, and kills those still running after grace. It waits
// for all of them. Close is idempotent.
func (ps *Pods) Close(grace time.Duration) {
	for _, p := range ps.list {
		close(p.quit)
		_ = p.stdin.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	for _, p := range ps.list {
		select {
		case <-p.done:
			continue
		case <-ctx.Done(): // stays done: every pod left is killed
		}
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	ps.list = nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex // guards b
	b   []byte
	max int
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
