package compare

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	redistest.Main(m, nil)
}

const (
	instances  = 4  // cache instances, each with its own client: the "processes"
	goroutines = 32 // concurrent callers per instance
)

// result prints one measurement in the fixed format the README table is
// built from.
func result(tb testing.TB, row, library, metric string, value any) {
	tb.Helper()
	tb.Logf("RESULT | %s | %s | %s=%v", row, library, metric, value)
}

// testCtx bounds a test; no test waits longer than this for anything.
func testCtx(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// counter is a loader that takes d and counts its calls; version is the
// number of the call, so a refreshed value differs from the old one.
type counter struct {
	d       time.Duration
	started atomic.Int64
	done    atomic.Int64
}

func (c *counter) load(ctx context.Context) (string, error) {
	n := c.started.Add(1)
	defer c.done.Add(1)
	t := time.NewTimer(c.d)
	defer t.Stop()
	select {
	case <-t.C: // the expensive work
	case <-ctx.Done():
		return "", ctx.Err()
	}
	return fmt.Sprintf("v%d", n), nil
}

// settle waits until at least want loads have finished and none is
// running, so background refreshes are counted and have ended.
func (c *counter) settle(ctx context.Context, want int64) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		s, d := c.started.Load(), c.done.Load()
		if s == d && d >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("loads: %d started, %d done, want %d: %w", s, d, want, ctx.Err())
		case <-tick.C: // background loads give no other signal
		}
	}
}

// getter is one instance's read-through call.
type getter func(ctx context.Context) (string, error)

// storm runs goroutines callers on each getter at once, behind one gate,
// and returns how long each call took.
func storm(ctx context.Context, gets []getter) ([]time.Duration, error) {
	release := make(chan struct{})
	errs := make(chan error, len(gets)*goroutines)
	took := make(chan time.Duration, len(gets)*goroutines)
	var wg sync.WaitGroup
	for _, get := range gets {
		for range goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case <-release:
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				}
				start := time.Now()
				v, err := get(ctx)
				took <- time.Since(start)
				if err != nil {
					errs <- err
				} else if !strings.HasPrefix(v, "v") {
					errs <- fmt.Errorf("got %q", v)
				}
			}()
		}
	}
	close(release)
	wg.Wait()
	close(errs)
	close(took)
	for err := range errs {
		return nil, err
	}
	var out []time.Duration
	for d := range took {
		out = append(out, d)
	}
	return out, nil
}

// recorder is a go-redis hook that records the commands sent while on.
type recorder struct {
	mu   sync.Mutex
	on   bool
	cmds []sent
}

type sent struct {
	name  string
	bytes int // argument bytes, command name included
}

func (r *recorder) start() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on, r.cmds = true, nil
}

func (r *recorder) stop() []sent {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.cmds
}

func (r *recorder) add(cmd redis.Cmder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.on {
		return
	}
	n := 0
	for _, a := range cmd.Args() {
		switch a := a.(type) {
		case string:
			n += len(a)
		case []byte:
			n += len(a)
		default:
			n += len(fmt.Sprint(a))
		}
	}
	r.cmds = append(r.cmds, sent{name: strings.ToUpper(cmd.Name()), bytes: n})
}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.add(cmd)
		return next(ctx, cmd)
	}
}

func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			r.add(c)
		}
		return next(ctx, cmds)
	}
}
