package redisx_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// pipelineCounter counts what a client sends: lone commands, and
// pipelines of INCRBY with their commands.
type pipelineCounter struct {
	lone, pipelines, piped atomic.Int64
}

func (*pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		p.lone.Add(1)
		return next(ctx, cmd)
	}
}

func (p *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() != "incrby" {
			return next(ctx, cmds) // a new connection's set-up (HELLO, CLIENT SETINFO)
		}
		p.pipelines.Add(1)
		p.piped.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// blockBatcher fills every pipeline slot of b with a BLPOP on list that
// stays on the server until the returned release is called. It returns
// once the BLPOPs are on the server: later commands wait in b's queue.
func blockBatcher(t *testing.T, ctx context.Context, b *redisx.Batcher, rc redis.UniversalClient, list string) (release func()) {
	t.Helper()
	n := redisx.BatchDepth
	done := make(chan error, n)
	for range n {
		go func() { done <- b.Do(ctx, redis.NewStringSliceCmd(ctx, "blpop", list, 30)) }()
	}
	want := fmt.Sprintf("blocked_clients:%d\r\n", n)
	for {
		info, err := rc.Info(ctx, "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(info, want) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("BLPOP returned before anything was pushed: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	return func() {
		for range n {
			if err := rc.RPush(ctx, list, "go").Err(); err != nil {
				t.Fatal(err)
			}
		}
		for range n {
			if err := <-done; err != nil {
				t.Fatalf("BLPOP: %v", err)
			}
		}
	}
}

// TestBatcher_coalesces: commands given while a pipeline is in flight go
// out together in the next one, each with its own reply; a lone command
// goes alone.
func TestBatcher_coalesces(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		rc := s.Client(t)
		var count pipelineCounter
		rc.AddHook(&count)
		b := redisx.NewBatcher(rc)
		key := redistest.Key(t, "b")

		// Alone: sent at once, as itself.
		if err := rc.Ping(ctx).Err(); err != nil { // the connection's set-up is not counted
			t.Fatal(err)
		}
		lone0, pipes0 := count.lone.Load(), count.pipelines.Load()
		if err := b.Do(ctx, redis.NewStatusCmd(ctx, "set", key+":lone", "v")); err != nil {
			t.Fatal(err)
		}
		if lone, pipes := count.lone.Load()-lone0, count.pipelines.Load()-pipes0; lone != 1 || pipes != 0 {
			t.Fatalf("a lone command: %d lone, %d pipelines; want 1, 0", lone, pipes)
		}

		release := blockBatcher(t, ctx, b, rc, key+":block")
		const n = 20
		cmds := make([]*redis.IntCmd, n)
		var wg sync.WaitGroup
		var queued sync.WaitGroup
		queued.Add(n)
		for i := range n {
			cmds[i] = redis.NewIntCmd(ctx, "incrby", key+":"+strconv.Itoa(i), i+1)
			wg.Go(func() {
				queued.Done()
				if err := b.Do(ctx, cmds[i]); err != nil {
					t.Errorf("INCRBY %d: %v", i, err)
				}
			})
		}
		queued.Wait()
		// Every goroutine is at Do or in it; wait until all are queued
		// behind the BLPOP (they cannot be sent before it returns).
		waitQueued(t, ctx, b, n)
		p0, piped0 := count.pipelines.Load(), count.piped.Load()
		release()
		wg.Wait()
		for i, c := range cmds {
			if c.Val() != int64(i+1) {
				t.Errorf("command %d: reply %d, want %d (each command keeps its own reply)", i, c.Val(), i+1)
			}
		}
		if got := count.pipelines.Load() - p0; got != 1 {
			t.Errorf("%d commands queued behind one in flight went in %d pipelines, want 1", n, got)
		}
		if got := count.piped.Load() - piped0; got != n {
			t.Errorf("%d commands piped, want %d", got, n)
		}
	}, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}

// TestBatcher_cancelWhileQueued: a caller whose context ends while its
// command waits gets the context's error, and its command is never sent;
// the others in the queue are sent.
func TestBatcher_cancelWhileQueued(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		rc := s.Client(t)
		b := redisx.NewBatcher(rc)
		key := redistest.Key(t, "c")
		release := blockBatcher(t, ctx, b, rc, key+":block")

		gone, cancel := context.WithCancel(ctx)
		first := make(chan error, 1)
		go func() { first <- b.Do(gone, redis.NewStatusCmd(gone, "set", key+":gone", "v")) }()
		waitQueued(t, ctx, b, 1)
		kept := make(chan error, 1)
		go func() { kept <- b.Do(ctx, redis.NewStatusCmd(ctx, "set", key+":kept", "v")) }()
		waitQueued(t, ctx, b, 2)
		cancel()
		if err := <-first; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled while queued: %v, want context.Canceled", err)
		}
		release()
		if err := <-kept; err != nil {
			t.Fatalf("the other queued command: %v", err)
		}
		if n, err := rc.Exists(ctx, key+":gone").Result(); err != nil || n != 0 {
			t.Errorf("the command taken back was sent: EXISTS = %d, %v", n, err)
		}
		if n, err := rc.Exists(ctx, key+":kept").Result(); err != nil || n != 1 {
			t.Errorf("the command kept was not sent: EXISTS = %d, %v", n, err)
		}
		if b.Queued() != 0 {
			t.Errorf("%d left queued", b.Queued())
		}
	}, redistest.Redis8)
}

// TestBatcher_errorsPerCommand: a command's error reply is its own; the
// others of its pipeline succeed. A dead connection fails all of them.
func TestBatcher_errorsPerCommand(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	ctx := testCtx(t)
	rc := s.Client(t)
	b := redisx.NewBatcher(rc)
	key := redistest.Key(t, "e")
	if err := rc.Set(ctx, key+":str", "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	release := blockBatcher(t, ctx, b, rc, key+":block")
	bad := redis.NewIntCmd(ctx, "incr", key+":str") // not an integer
	good := redis.NewIntCmd(ctx, "incr", key+":n")
	errs := make(chan error, 2)
	go func() { errs <- b.Do(ctx, bad) }()
	waitQueued(t, ctx, b, 1)
	go func() { errs <- b.Do(ctx, good) }()
	waitQueued(t, ctx, b, 2)
	release()
	<-errs
	<-errs
	if !redisx.IsReply(bad.Err()) {
		t.Errorf("INCR of a string: %v, want an error reply", bad.Err())
	}
	if good.Err() != nil || good.Val() != 1 {
		t.Errorf("INCR beside it: %d, %v; want 1, nil", good.Val(), good.Err())
	}

	closed := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	closed.Close()
	cb := redisx.NewBatcher(closed)
	if err := cb.Do(ctx, redis.NewStatusCmd(ctx, "ping")); err == nil {
		t.Error("a command on a closed client succeeded")
	}
}

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// waitQueued returns once n commands wait in b.
func waitQueued(t *testing.T, ctx context.Context, b *redisx.Batcher, n int) {
	t.Helper()
	for b.Queued() < n {
		if ctx.Err() != nil {
			t.Fatalf("%d commands queued, want %d", b.Queued(), n)
		}
		runtime.Gosched()
	}
}

// TestBatcher_autoPipelinerDirect: on go-redis's AutoPipeliner, which
// pipelines concurrent callers itself, the Batcher sends each command at
// once: one given while every pipeline slot is taken by a command that
// blocks on the server is not queued behind them.
func TestBatcher_autoPipelinerDirect(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		rc := s.Client(t)
		ap, err := rc.(*redis.Client).AutoPipeline()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ap.Close() })
		b := redisx.NewBatcher(ap)
		key := redistest.Key(t, "d")
		release := blockBatcher(t, ctx, b, rc, key+":block")
		defer release()
		cmd := redis.NewIntCmd(ctx, "incrby", key, 7)
		if err := b.Do(ctx, cmd); err != nil || cmd.Val() != 7 {
			t.Fatalf("INCRBY while %d BLPOPs block: %d, %v; want 7 before they return", redisx.BatchDepth, cmd.Val(), err)
		}
	}, redistest.Redis8, redistest.Valkey)
}
