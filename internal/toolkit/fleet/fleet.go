// Package fleet runs a program's own binary again as worker processes and
// talks to them line by line: the examples use it to show what happens
// when separate processes, as separate pods, share one server.
package fleet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
)

// Fleet is a set of running worker processes. Its methods other than Close
// must be called from one goroutine. Use Start to create a Fleet.
type Fleet struct {
	names  []string
	stdins []io.WriteCloser
	events chan event
	cancel context.CancelFunc // kills the workers
	wg     sync.WaitGroup     // the goroutines that read and reap the workers
	exited int
}

// event is a line from a worker, or its exit.
type event struct {
	worker int
	line   string
	exited bool
	err    error // with exited: nil if the worker exited cleanly
}

// Start starts one worker per name: os.Args[0] again, with the current
// environment plus env(name). A worker reads lines on stdin until it is
// closed and writes lines on stdout; its stderr goes to ours. Workers are
// killed when ctx ends or Close is called.
func Start(ctx context.Context, names []string, env func(name string) []string) (*Fleet, error) {
	ctx, cancel := context.WithCancel(ctx)
	f := &Fleet{names: names, events: make(chan event), cancel: cancel}
	for i, name := range names {
		cmd := exec.CommandContext(ctx, os.Args[0])
		cmd.Env = append(os.Environ(), env(name)...)
		cmd.Stderr = os.Stderr
		in, err := cmd.StdinPipe()
		if err != nil {
			f.Close()
			return nil, err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			f.Close()
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			f.Close()
			return nil, err
		}
		f.stdins = append(f.stdins, in)
		f.wg.Go(func() {
			sc := bufio.NewScanner(out)
			sc.Buffer(nil, 4<<20)
			for sc.Scan() {
				select {
				case f.events <- event{worker: i, line: sc.Text()}:
				case <-ctx.Done():
				}
			}
			err := cmd.Wait()
			select {
			case f.events <- event{worker: i, exited: true, err: err}:
			case <-ctx.Done():
			}
		})
	}
	return f, nil
}

// Collect hands the next n lines from the workers (in the order they
// come) to handle, with the index of the worker that wrote each. A worker
// that fails meanwhile is an error, and so is every worker having exited
// before n lines came.
func (f *Fleet) Collect(ctx context.Context, n int, handle func(worker int, line string) error) error {
	for n > 0 {
		var e event
		select {
		case e = <-f.events:
		case <-ctx.Done():
			return ctx.Err()
		}
		if e.exited {
			f.exited++
			if e.err != nil {
				return fmt.Errorf("worker %s: %w", f.names[e.worker], e.err)
			}
			if f.exited == len(f.names) {
				return fmt.Errorf("every worker exited with %d lines still expected", n)
			}
			continue // it said all it had to say; others still talk
		}
		if err := handle(e.worker, e.line); err != nil {
			return fmt.Errorf("worker %s: %w", f.names[e.worker], err)
		}
		n--
	}
	return nil
}

// Send sends line to worker i.
func (f *Fleet) Send(i int, line string) error {
	_, err := io.WriteString(f.stdins[i], line+"\n")
	return err
}

// Broadcast sends line to every worker.
func (f *Fleet) Broadcast(line string) error {
	for i := range f.stdins {
		if err := f.Send(i, line); err != nil {
			return err
		}
	}
	return nil
}

// Finish closes the workers' input, which stops them, and waits for them
// to exit; a worker that fails or writes more is an error.
func (f *Fleet) Finish(ctx context.Context) error {
	for _, in := range f.stdins {
		in.Close()
	}
	for f.exited < len(f.stdins) {
		select {
		case e := <-f.events:
			if !e.exited {
				return fmt.Errorf("worker %s: unexpected output %q", f.names[e.worker], e.line)
			}
			f.exited++
			if e.err != nil {
				return fmt.Errorf("worker %s: %w", f.names[e.worker], e.err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Close kills workers that are still running and waits for their readers.
// It is safe to call more than once.
func (f *Fleet) Close() {
	f.cancel()
	f.wg.Wait()
}
